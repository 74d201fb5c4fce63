// ShardReader: streams ranges of records out of record shards (record_file.h) on a prefetch
// thread, holding at most a bounded number of bytes in memory.
//
// A range is [begin, end) record numbers of one shard: what one task of the task master
// (task_master.h) names. For each range the thread reads the shard's index, checks that the shard
// is as long as its index says (a truncated shard is an error before any of its records is used),
// seeks to record `begin` and reads up to `end`, checking every record's CRC and that it starts
// where the index says. Records travel to the consumer in chunks (one queue entry and one lock
// hand-off per chunk, not per record; NextChunk() takes a whole chunk) through a queue of at most
// `max_buffered_bytes` (one chunk is always let through, however large), so a fast disk cannot
// outrun a slow trainer's memory: at most about 2 x max_buffered_bytes are held (the queue, the
// chunk the consumer took, the one being read). Readers that share a ShardIndexCache read each
// shard's index once between them (a trainer opens one reader per task, many per shard).
//
// Errors (kDataLoss for corrupt or truncated data, kNotFound for a missing shard or index) name
// the shard file and the byte offset; they are delivered by Next() after the records before them,
// and again on every later call. Next() is bounded by a timeout: a stalled filesystem is an
// error naming the shard and offset being read, not a hang.
//
// Not thread-safe: one consumer calls Next(); the producer thread is internal and the destructor
// stops and joins it. The producer checks for that before every record it reads (and while it
// waits for room), so destruction mid-stream takes about one record's read, not the rest of the
// range.
#ifndef PADDLE_DATA_SHARD_READER_H_
#define PADDLE_DATA_SHARD_READER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace paddle {
namespace data {

struct RecordRange {
  std::string shard;  // path of the shard file
  int64_t begin = 0;  // first record number
  int64_t end = 0;    // one past the last
};

struct ShardRecord {
  std::string data;
  size_t range = 0;    // which of the ranges it came from
  int64_t record = 0;  // its record number in the shard
};

// The indexes of the shards read so far (record_file.h's ReadIndex), shared by readers and their
// threads. Thread-safe. An index is trusted once read: each range still checks the shard's size
// against it, so a shard truncated or rewritten later is still an error.
class ShardIndexCache {
 public:
  absl::StatusOr<std::shared_ptr<const std::vector<uint64_t>>> Get(const std::string& shard);
  int64_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const std::vector<uint64_t>>> indexes_ ABSL_GUARDED_BY(mu_);
};

// The index of `range.shard`, from `cache` (null: read for this call), checked to cover the range:
// kOutOfRange naming the shard, its record count and the range that `asker` ("the task",
// "range 3") asks for unless range.end is at most the count; ReadIndex's errors otherwise. Shared
// by the readers of ranges (ShardReader, TaskFeed).
absl::StatusOr<std::shared_ptr<const std::vector<uint64_t>>> IndexForRange(const RecordRange& range,
                                                                           ShardIndexCache* cache,
                                                                           absl::string_view asker);
// kDataLoss naming the shard and both sizes unless `size`, the shard file's, is the size its
// index `offsets` ends with: a truncated shard (naming the first missing byte) or one changed
// after its index was written.
absl::Status CheckShardSize(const std::string& shard, uint64_t size,
                            const std::vector<uint64_t>& offsets);

struct ShardReaderOptions {
  int64_t max_buffered_bytes = int64_t{32} << 20;
  absl::Duration timeout = absl::Seconds(60);    // bound on each Next()
  std::shared_ptr<ShardIndexCache> index_cache;  // null: each range reads its shard's index
};

class ShardReader {
 public:
  // Starts reading `ranges` in order. kInvalidArgument naming the range unless 0 <= begin <= end
  // and max_buffered_bytes > 0; problems with the files themselves come from Next().
  static absl::StatusOr<std::unique_ptr<ShardReader>> Create(std::vector<RecordRange> ranges,
                                                             ShardReaderOptions options = {});
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The next record; nullopt after the last record of the last range. Errors as in the file
  // comment; kDeadlineExceeded naming the shard and offset being read if none arrives in time.
  absl::StatusOr<std::optional<ShardRecord>> Next();
  // The rest of the chunk Next() would read from (at least one record, in order); empty after the
  // last record. Errors as Next().
  absl::StatusOr<std::vector<ShardRecord>> NextChunk();
  // Thread-safe: makes the producer stop and every waiting or later Next()/NextChunk() fail with
  // kCancelled, so that a thread blocked on this reader can be joined before its destruction.
  void Stop();

 private:
  ShardReader(std::vector<RecordRange> ranges, ShardReaderOptions options)
      : ranges_(std::move(ranges)), options_(std::move(options)) {}
  void Produce();
  absl::Status ReadRange(size_t r);
  // Waits for room, then queues the records of `chunk` (and empties it); false if the reader is
  // being destroyed.
  bool Push(std::vector<ShardRecord>& chunk, int64_t bytes);
  // Moves the next queued chunk into taken_ (waiting for one); false after the last record.
  absl::StatusOr<bool> Refill();

  const std::vector<RecordRange> ranges_;
  const ShardReaderOptions options_;
  std::thread producer_;
  std::vector<ShardRecord> taken_;  // the consumer's: the chunk it took from queue_
  size_t taken_at_ = 0;             // its next record

  // std::mutex, not absl::Mutex, so that TSan checks it (Note [Locks and ThreadSanitizer] in
  // paddle/collective/transport/tcp/tcp_request.h).
  std::mutex mu_;
  std::condition_variable cv_;
  struct Chunk {
    std::vector<ShardRecord> records;
    int64_t bytes = 0;
  };
  std::deque<Chunk> queue_ ABSL_GUARDED_BY(mu_);
  int64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancelled_{false};  // stop_, for the read loop to check without the lock
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::string position_ ABSL_GUARDED_BY(mu_);  // "shard S at byte B", for timeout errors
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_SHARD_READER_H_
