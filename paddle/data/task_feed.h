// TaskFeed: the samples of one task (a record range of one shard) decoded into training rows on a
// prefetch thread, so the training thread only copies ready rows.
//
// A ShardReader (shard_reader.h) streams and checks the range's records; the feed's thread takes
// them a chunk at a time, decodes each chunk into a slab (the sample ids, the label as int64, the
// uint8 image normalized to float32 through a 256-entry table) and queues the slab; at most
// `max_slabs` wait, so memory stays bounded however slow the consumer. Take() copies whole runs of
// rows out of the slabs (one memcpy per run, as the in-memory loader's gather is one per row).
//
// The layout is that of a ShardSet record (shard_set.h): the 8-byte sample id, then the fields;
// the feed reads a uint8 label field and a uint8 image field at the given offsets after the id.
//
// Errors (the ShardReader's: corrupt or truncated shard, naming the shard and byte offset; a
// record of the wrong size) come from Take() after the rows before them, and again on every
// later call. Take() waits at most `timeout` for a slab. Not thread-safe: one consumer calls
// Take(); the destructor stops and joins the thread without waiting for the range's end.
#ifndef PADDLE_DATA_TASK_FEED_H_
#define PADDLE_DATA_TASK_FEED_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/data/shard_reader.h"

namespace paddle {
namespace data {

struct TaskFeedLayout {
  int64_t record_bytes = 0;  // of a whole record, the 8-byte id included
  int64_t label_offset = 0;  // of the uint8 label, counted after the id
  int64_t image_offset = 0;  // of the uint8 image, counted after the id
  int64_t image_bytes = 0;   // pixels of one image
  float mean = 0, std = 1;   // a pixel p becomes (p / 255 - mean) / std
};

struct TaskFeedOptions {
  int max_slabs = 4;  // decoded slabs waiting (each is one ShardReader chunk)
  absl::Duration timeout = absl::Seconds(60);  // bound on each wait in Take()
  std::shared_ptr<ShardIndexCache> index_cache;
};

class TaskFeed {
 public:
  // Starts reading and decoding `range`. kInvalidArgument naming the value unless the layout's
  // fields lie inside the record and max_slabs > 0.
  static absl::StatusOr<std::unique_ptr<TaskFeed>> Start(RecordRange range, TaskFeedLayout layout,
                                                         TaskFeedOptions options = {});
  ~TaskFeed();
  TaskFeed(const TaskFeed&) = delete;
  TaskFeed& operator=(const TaskFeed&) = delete;

  // Copies up to `n` samples into rows of `images` (image_bytes floats each) and `labels`, and
  // appends their ids to `ids`; returns how many, 0 once the range is used up.
  absl::StatusOr<int64_t> Take(int64_t n, float* images, int64_t* labels,
                               std::vector<int64_t>* ids);

 private:
  struct Slab {
    std::vector<float> images;
    std::vector<int64_t> labels, ids;
  };
  TaskFeed(RecordRange range, TaskFeedLayout layout, TaskFeedOptions options);
  void Produce();
  absl::Status Decode(const std::vector<ShardRecord>& records, Slab* slab) const;

  const RecordRange range_;
  const TaskFeedLayout layout_;
  const TaskFeedOptions options_;
  float table_[256];
  std::unique_ptr<ShardReader> reader_;  // the producer thread's, until the destructor
  std::thread producer_;
  Slab current_;  // the consumer's: the slab it takes rows from
  size_t at_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slab> queue_ ABSL_GUARDED_BY(mu_);
  // Slabs the consumer is done with, for the producer to fill again: fresh ones cost a page
  // fault and a zero fill per 4 KiB, more than the decode itself.
  std::vector<Slab> free_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_TASK_FEED_H_
