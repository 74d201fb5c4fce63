// TaskFeed: read and check on one prefetch thread, rows handed over in byte slabs.
//
// Note [Byte slabs]
// A slab keeps an image as its uint8 pixels, and Take() normalizes them into the caller's batch.
// Normalizing on the reader into float slabs that Take() then copied wrote every float row twice
// and read it once more (4 bytes a pixel each time), on a machine whose two cores are both
// training: the in-memory loader pays for its one conversion before the first epoch, so those
// extra passes were a good part of what the shard path cost beyond it. Now the reader moves a
// byte a pixel, and the float row is written once, by a conversion that takes the place of
// Take()'s copy. docs/data.md has the before/after.
#include "paddle/data/task_feed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/core/status.h"
#include "paddle/data/record_file.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {
namespace {

// Bytes of whole records read with one pread and checked into one slab (one record at least).
constexpr uint64_t kBlockBytes = uint64_t{256} << 10;

}  // namespace

absl::Status TaskFeed::CheckArguments(const RecordRange& range, const TaskFeedLayout& layout,
                                      const TaskFeedOptions& options) {
  const int64_t fields = layout.record_bytes - 8;
  if (layout.image_bytes <= 0 || layout.label_offset < 0 || layout.image_offset < 0 ||
      layout.label_offset >= fields || layout.image_offset + layout.image_bytes > fields ||
      options.max_slabs <= 0 || !(layout.std > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TaskFeed: bad layout for ", range.shard, ": record_bytes ", layout.record_bytes,
        ", label at ", layout.label_offset, ", image at ", layout.image_offset, " (",
        layout.image_bytes, " bytes), std ", layout.std, ", max_slabs ", options.max_slabs));
  }
  if (range.begin < 0 || range.end < range.begin) {
    return absl::InvalidArgumentError(absl::StrCat("TaskFeed: the range of shard ", range.shard,
                                                   " is [", range.begin, ", ", range.end,
                                                   "), not a range"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TaskFeed>> TaskFeed::Start(RecordRange range, TaskFeedLayout layout,
                                                          TaskFeedOptions options) {
  RETURN_IF_ERROR(CheckArguments(range, layout, options));
  std::unique_ptr<TaskFeed> feed(new TaskFeed(std::move(range), layout, std::move(options)));
  feed->producer_ = std::thread([f = feed.get()] { f->Produce(); });
  return feed;
}

absl::StatusOr<std::unique_ptr<TaskFeed>> TaskFeed::ReadNow(RecordRange range,
                                                            TaskFeedLayout layout,
                                                            TaskFeedOptions options) {
  RETURN_IF_ERROR(CheckArguments(range, layout, options));
  std::unique_ptr<TaskFeed> feed(new TaskFeed(std::move(range), layout, std::move(options)));
  feed->bounded_ = false;
  feed->Produce();
  return feed;
}

TaskFeed::TaskFeed(RecordRange range, TaskFeedLayout layout, TaskFeedOptions options)
    : range_(std::move(range)),
      layout_(layout),
      options_(std::move(options)),
      pixels_(PixelNormalization::MeanStd(layout.mean, layout.std)) {}

TaskFeed::~TaskFeed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cancelled_.store(true, std::memory_order_relaxed);
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

void TaskFeed::Produce() {
  absl::Status status = ReadRange();
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  error_ = status;
  cv_.notify_all();
}

TaskFeed::Slab TaskFeed::FreeSlab() {
  std::lock_guard<std::mutex> lock(mu_);
  Slab slab;
  if (!free_.empty()) {
    slab = std::move(free_.back());
    free_.pop_back();
  }
  return slab;  // Decode sizes it: a used slab of the same size is neither cleared nor zeroed
}

bool TaskFeed::Push(Slab slab) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || !bounded_ || static_cast<int>(queue_.size()) < options_.max_slabs;
  });
  if (stop_) return false;
  queue_.push_back(std::move(slab));
  cv_.notify_all();
  return true;
}

absl::Status TaskFeed::ReadRange() {
  const RecordRange& range = range_;
  if (range.begin == range.end) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<uint64_t>> index,
                   IndexForRange(range, options_.index_cache.get(), "the task"));
  const std::vector<uint64_t>& offsets = *index;
  const int fd = ::open(range.shard.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("shard ", range.shard, " cannot be opened (",
                                            std::strerror(errno), "); its index exists"));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(
        absl::StrCat("stat of shard ", range.shard, ": ", std::strerror(errno)));
  }
  RETURN_IF_ERROR(CheckShardSize(range.shard, static_cast<uint64_t>(st.st_size), offsets));
  std::vector<char> block;
  for (int64_t first = range.begin; first < range.end;) {
    if (cancelled_.load(std::memory_order_relaxed)) {
      return absl::CancelledError("TaskFeed destroyed");
    }
    // A block: whole records up to kBlockBytes (at least one, however large).
    int64_t last = first + 1;
    while (last < range.end && offsets[last + 1] - offsets[first] <= kBlockBytes) ++last;
    const uint64_t begin = offsets[first], bytes = offsets[last] - begin;
    if (block.size() < bytes) block.resize(bytes);
    for (uint64_t got = 0; got < bytes;) {
      const ssize_t n = ::pread(fd, block.data() + got, bytes - got, begin + got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::InternalError(absl::StrCat("reading shard ", range.shard, " at byte offset ",
                                                begin + got, ": ", std::strerror(errno)));
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(
            "shard ", range.shard, ": the file ends at byte offset ", begin + got,
            " while the index says ", offsets.back(), ": truncated shard (it shrank while read)"));
      }
      got += static_cast<uint64_t>(n);
    }
    Slab slab = FreeSlab();
    absl::Status status = Decode(block.data(), offsets, first, last - first, &slab);
    // The rows before a bad record are delivered before its error.
    if (!slab.ids.empty() && !Push(std::move(slab))) {
      return absl::CancelledError("TaskFeed destroyed");
    }
    RETURN_IF_ERROR(status);
    first = last;
  }
  return absl::OkStatus();
}

absl::Status TaskFeed::Decode(const char* block, const std::vector<uint64_t>& offsets,
                              int64_t first, int64_t n, Slab* slab) const {
  const size_t px = static_cast<size_t>(layout_.image_bytes);
  if (slab->pixel_capacity < static_cast<size_t>(n) * px) {
    slab->pixel_capacity = static_cast<size_t>(n) * px;
    slab->pixels.reset(new uint8_t[slab->pixel_capacity]);
  }
  slab->labels.resize(static_cast<size_t>(n));
  slab->ids.resize(static_cast<size_t>(n));
  size_t rows = 0;
  absl::Status status;
  for (int64_t i = first; i < first + n; ++i, ++rows) {
    const uint64_t at = offsets[i] - offsets[first];
    absl::StatusOr<absl::string_view> d =
        CheckFramedRecord(absl::string_view(block + at, offsets[i + 1] - offsets[i]), range_.shard,
                          static_cast<int64_t>(offsets[i]));
    if (!d.ok()) {
      status = d.status();
      break;
    }
    if (static_cast<int64_t>(d->size()) != layout_.record_bytes) {
      status =
          absl::DataLossError(absl::StrCat("record ", i, " of ", range_.shard, " is ", d->size(),
                                           " bytes, the layout says ", layout_.record_bytes));
      break;
    }
    absl::StatusOr<int64_t> id = DecodeSampleId(*d);
    if (!id.ok()) {
      status = id.status();
      break;
    }
    slab->ids[rows] = *id;
    const auto* b = reinterpret_cast<const uint8_t*>(d->data());
    slab->labels[rows] = b[8 + layout_.label_offset];
    std::memcpy(slab->pixels.get() + rows * px, b + 8 + layout_.image_offset, px);
  }
  slab->labels.resize(rows);
  slab->ids.resize(rows);
  return status;
}

absl::StatusOr<int64_t> TaskFeed::Take(int64_t n, float* images, int64_t* labels,
                                       std::vector<int64_t>* ids) {
  const int64_t px = layout_.image_bytes;
  int64_t got = 0;
  while (got < n) {
    if (at_ == current_.labels.size()) {
      std::unique_lock<std::mutex> lock(mu_);
      const absl::Time give_up = absl::Now() + options_.timeout;
      while (queue_.empty() && !done_) {
        const absl::Duration left = give_up - absl::Now();
        if (left <= absl::ZeroDuration()) {
          return absl::DeadlineExceededError(
              absl::StrCat("TaskFeed: no sample of ", range_.shard, " records [", range_.begin,
                           ", ", range_.end, ") within ", absl::FormatDuration(options_.timeout),
                           " after ", got, " of ", n, "; is the filesystem stalled?"));
        }
        cv_.wait_for(lock, absl::ToChronoNanoseconds(std::min(left, absl::Hours(1))));
      }
      if (queue_.empty()) {  // done: the rows before an error were all taken
        if (!error_.ok()) return error_;
        return got;
      }
      if (free_.size() < 2) free_.push_back(std::move(current_));
      current_ = std::move(queue_.front());
      queue_.pop_front();
      at_ = 0;
      cv_.notify_all();
    }
    const int64_t k = std::min<int64_t>(n - got, current_.labels.size() - at_);
    NormalizePixels(current_.pixels.get() + at_ * px, static_cast<size_t>(k * px), pixels_,
                    images + got * px);
    std::copy_n(current_.labels.data() + at_, k, labels + got);
    ids->insert(ids->end(), current_.ids.begin() + at_, current_.ids.begin() + at_ + k);
    at_ += k;
    got += k;
  }
  return got;
}

}  // namespace data
}  // namespace paddle
