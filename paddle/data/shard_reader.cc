// ShardReader: the prefetch thread over record shards.
#include "paddle/data/shard_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/core/status.h"
#include "paddle/data/record_file.h"

namespace paddle {
namespace data {

absl::StatusOr<std::shared_ptr<const std::vector<uint64_t>>> ShardIndexCache::Get(
    const std::string& shard) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = indexes_.find(shard);
    if (it != indexes_.end()) return it->second;
  }
  // Read outside the lock: a stalled index must not hold up readers of other shards. Two threads
  // missing the same shard both read it; the first one stored wins.
  ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, ReadIndex(shard));
  auto read = std::make_shared<const std::vector<uint64_t>>(std::move(offsets));
  std::lock_guard<std::mutex> lock(mu_);
  return indexes_.emplace(shard, std::move(read)).first->second;
}

int64_t ShardIndexCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(indexes_.size());
}

absl::StatusOr<std::shared_ptr<const std::vector<uint64_t>>> IndexForRange(
    const RecordRange& range, ShardIndexCache* cache, absl::string_view asker) {
  std::shared_ptr<const std::vector<uint64_t>> index;
  if (cache != nullptr) {
    ASSIGN_OR_RETURN(index, cache->Get(range.shard));
  } else {
    ASSIGN_OR_RETURN(std::vector<uint64_t> read, ReadIndex(range.shard));
    index = std::make_shared<const std::vector<uint64_t>>(std::move(read));
  }
  const int64_t count = static_cast<int64_t>(index->size()) - 1;
  if (range.end > count) {
    return absl::OutOfRangeError(absl::StrCat("shard ", range.shard, " has ", count, " records; ",
                                              asker, " asks for [", range.begin, ", ", range.end,
                                              ")"));
  }
  return index;
}

absl::Status CheckShardSize(const std::string& shard, uint64_t size,
                            const std::vector<uint64_t>& offsets) {
  if (size == offsets.back()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "shard ", shard, " is ", size, " bytes but its index says ", offsets.back(),
      size < offsets.back() ? absl::StrCat(": truncated shard (the records from byte offset ", size,
                                           " on are missing)")
                            : ": the shard was changed after its index was written"));
}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Create(std::vector<RecordRange> ranges,
                                                                 ShardReaderOptions options) {
  if (options.max_buffered_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShardReader: max_buffered_bytes must be > 0, got ", options.max_buffered_bytes));
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin < 0 || ranges[i].end < ranges[i].begin) {
      return absl::InvalidArgumentError(absl::StrCat("ShardReader: range ", i, " of shard ",
                                                     ranges[i].shard, " is [", ranges[i].begin,
                                                     ", ", ranges[i].end, "), not a range"));
    }
  }
  std::unique_ptr<ShardReader> reader(new ShardReader(std::move(ranges), std::move(options)));
  reader->producer_ = std::thread([r = reader.get()] { r->Produce(); });
  return reader;
}

ShardReader::~ShardReader() {
  Stop();
  producer_.join();
}

void ShardReader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cancelled_.store(true, std::memory_order_relaxed);
  cv_.notify_all();
}

void ShardReader::Produce() {
  absl::Status status;
  for (size_t r = 0; r < ranges_.size() && status.ok() && !cancelled_.load(); ++r) {
    status = ReadRange(r);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = status;
  }
  cv_.notify_all();
}

absl::Status ShardReader::ReadRange(size_t r) {
  const RecordRange& range = ranges_[r];
  if (range.begin == range.end) return absl::OkStatus();
  {
    // Before the first record too: a stalled open of the index must name the shard.
    std::lock_guard<std::mutex> lock(mu_);
    position_ = absl::StrCat("the index of shard ", range.shard, " (range ", r, ")");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<uint64_t>> index,
                   IndexForRange(range, options_.index_cache.get(), absl::StrCat("range ", r)));
  const std::vector<uint64_t>& offsets = *index;
  struct stat st;
  if (::stat(range.shard.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("shard ", range.shard, " (named by range ", r,
                                            ") cannot be read; its index exists"));
  }
  RETURN_IF_ERROR(CheckShardSize(range.shard, static_cast<uint64_t>(st.st_size), offsets));
  ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                   RecordReader::Open(range.shard, static_cast<int64_t>(offsets[range.begin])));
  const int64_t chunk_limit = std::min<int64_t>(256 << 10, options_.max_buffered_bytes / 2);
  std::vector<ShardRecord> chunk;
  int64_t chunk_bytes = 0;
  absl::Status status;
  for (int64_t i = range.begin; i < range.end; ++i) {
    if (cancelled_.load(std::memory_order_relaxed)) {
      return absl::CancelledError("ShardReader destroyed");
    }
    if (chunk.empty()) {  // once a chunk: a stall names the chunk's first byte
      std::lock_guard<std::mutex> lock(mu_);
      position_ = absl::StrCat("shard ", range.shard, " at byte offset ", reader->offset());
    }
    ShardRecord record;
    record.range = r;
    record.record = i;
    absl::StatusOr<bool> got = reader->Read(&record.data);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    if (!*got || static_cast<uint64_t>(reader->offset()) != offsets[i + 1]) {
      status = absl::DataLossError(
          absl::StrCat("shard ", range.shard, ": record ", i, " at byte offset ", offsets[i],
                       " does not end where its index says (", offsets[i + 1], ")"));
      break;
    }
    chunk_bytes += static_cast<int64_t>(record.data.size());
    chunk.push_back(std::move(record));
    if (chunk_bytes >= chunk_limit && !Push(chunk, std::exchange(chunk_bytes, 0))) {
      return absl::CancelledError("ShardReader destroyed");
    }
  }
  // The records before an error are delivered before it.
  if (!chunk.empty() && !Push(chunk, chunk_bytes)) {
    return absl::CancelledError("ShardReader destroyed");
  }
  return status;
}

bool ShardReader::Push(std::vector<ShardRecord>& chunk, int64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || queue_.empty() || buffered_bytes_ + bytes <= options_.max_buffered_bytes;
  });
  if (stop_) return false;
  buffered_bytes_ += bytes;
  queue_.push_back(Chunk{std::move(chunk), bytes});
  chunk = {};
  cv_.notify_all();
  return true;
}

absl::StatusOr<bool> ShardReader::Refill() {
  std::unique_lock<std::mutex> lock(mu_);
  // Waits in steps of at most an hour: an infinite (or huge) timeout converted to a std::chrono
  // deadline would overflow and time out at once.
  const absl::Time give_up = absl::Now() + options_.timeout;
  while (queue_.empty() && !done_ && !stop_) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("ShardReader: no record within ", absl::FormatDuration(options_.timeout),
                       " while reading ", position_, "; is the filesystem stalled?"));
    }
    cv_.wait_for(lock, absl::ToChronoNanoseconds(std::min(left, absl::Hours(1))));
  }
  if (stop_) return absl::CancelledError("ShardReader stopped");
  if (queue_.empty()) {
    if (!error_.ok()) return error_;
    return false;
  }
  taken_ = std::move(queue_.front().records);
  taken_at_ = 0;
  buffered_bytes_ -= queue_.front().bytes;
  queue_.pop_front();
  cv_.notify_all();
  return true;
}

absl::StatusOr<std::optional<ShardRecord>> ShardReader::Next() {
  if (taken_at_ == taken_.size()) {
    ASSIGN_OR_RETURN(bool more, Refill());
    if (!more) return std::optional<ShardRecord>();
  }
  return std::optional<ShardRecord>(std::move(taken_[taken_at_++]));
}

absl::StatusOr<std::vector<ShardRecord>> ShardReader::NextChunk() {
  if (taken_at_ == taken_.size()) {
    ASSIGN_OR_RETURN(bool more, Refill());
    if (!more) return std::vector<ShardRecord>();
  }
  std::vector<ShardRecord> out;
  if (taken_at_ == 0) {
    out = std::move(taken_);
  } else {
    out.assign(std::make_move_iterator(taken_.begin() + static_cast<ptrdiff_t>(taken_at_)),
               std::make_move_iterator(taken_.end()));
  }
  taken_.clear();
  taken_at_ = 0;
  return out;
}

}  // namespace data
}  // namespace paddle
