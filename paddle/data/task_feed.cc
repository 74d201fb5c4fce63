// TaskFeed: decode on the prefetch thread, rows handed over in slabs.
#include "paddle/data/task_feed.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/core/status.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {

absl::StatusOr<std::unique_ptr<TaskFeed>> TaskFeed::Start(RecordRange range, TaskFeedLayout layout,
                                                          TaskFeedOptions options) {
  const int64_t fields = layout.record_bytes - 8;
  if (layout.image_bytes <= 0 || layout.label_offset < 0 || layout.image_offset < 0 ||
      layout.label_offset >= fields || layout.image_offset + layout.image_bytes > fields ||
      options.max_slabs <= 0 || !(layout.std > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TaskFeed: bad layout for ", range.shard, ": record_bytes ", layout.record_bytes,
        ", label at ", layout.label_offset, ", image at ", layout.image_offset, " (",
        layout.image_bytes, " bytes), std ", layout.std, ", max_slabs ", options.max_slabs));
  }
  ShardReaderOptions ro;
  ro.timeout = options.timeout;
  ro.index_cache = options.index_cache;
  // Two chunks ahead is plenty: the slabs queued here are the feed's real buffer.
  ro.max_buffered_bytes = int64_t{1} << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Create({range}, ro));
  std::unique_ptr<TaskFeed> feed(new TaskFeed(std::move(range), layout, std::move(options)));
  feed->reader_ = std::move(reader);
  feed->producer_ = std::thread([f = feed.get()] { f->Produce(); });
  return feed;
}

TaskFeed::TaskFeed(RecordRange range, TaskFeedLayout layout, TaskFeedOptions options)
    : range_(std::move(range)), layout_(layout), options_(std::move(options)) {
  for (int p = 0; p < 256; ++p) {
    table_[p] = (static_cast<float>(p) / 255.0f - layout_.mean) / layout_.std;
  }
}

TaskFeed::~TaskFeed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reader_->Stop();  // the producer may be waiting in NextChunk()
  producer_.join();
}

absl::Status TaskFeed::Decode(const std::vector<ShardRecord>& records, Slab* slab) const {
  const size_t n = records.size();
  const int64_t px = layout_.image_bytes;
  slab->images.resize(n * static_cast<size_t>(px));
  slab->labels.resize(n);
  slab->ids.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& d = records[i].data;
    if (static_cast<int64_t>(d.size()) != layout_.record_bytes) {
      return absl::DataLossError(absl::StrCat("record ", records[i].record, " of ", range_.shard,
                                              " is ", d.size(), " bytes, the layout says ",
                                              layout_.record_bytes));
    }
    ASSIGN_OR_RETURN(slab->ids[i], DecodeSampleId(d));
    const auto* b = reinterpret_cast<const uint8_t*>(d.data());
    slab->labels[i] = b[8 + layout_.label_offset];
    const uint8_t* img = b + 8 + layout_.image_offset;
    float* out = slab->images.data() + i * static_cast<size_t>(px);
    for (int64_t k = 0; k < px; ++k) out[k] = table_[img[k]];
  }
  return absl::OkStatus();
}

void TaskFeed::Produce() {
  absl::Status status;
  while (true) {
    absl::StatusOr<std::vector<ShardRecord>> chunk = reader_->NextChunk();
    if (!chunk.ok()) {
      status = chunk.status();
      break;
    }
    if (chunk->empty()) break;
    Slab slab;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        slab = std::move(free_.back());
        free_.pop_back();
      }
    }
    status = Decode(*chunk, &slab);
    if (!status.ok()) break;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < options_.max_slabs; });
    if (stop_) return;
    queue_.push_back(std::move(slab));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  error_ = status;
  cv_.notify_all();
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
    std::memcpy(images + got * px, current_.images.data() + at_ * px, k * px * sizeof(float));
    std::copy_n(current_.labels.data() + at_, k, labels + got);
    ids->insert(ids->end(), current_.ids.begin() + at_, current_.ids.begin() + at_ + k);
    at_ += k;
    got += k;
  }
  return got;
}

}  // namespace data
}  // namespace paddle
