// TaskFeed: the samples of one task (a record range of one shard), read and checked on a prefetch
// thread, so the training thread only converts ready rows.
//
// One thread per feed reads and checks: it reads the shard's index (through the shared
// ShardIndexCache), checks that the shard is as long as the index says (a truncated shard is an
// error before any of its records is used), then reads the range a block of whole records at a
// time (about 256 KiB, one pread of exactly the block's bytes, never past the range's end), checks
// each record's framing and CRCs in place (record_file.h's CheckFramedRecord) and keeps what a
// row needs in a slab: the sample ids, the label as int64, the image's uint8 pixels. No record is
// allocated on its own, and there is no second thread to hand records to: on a machine with
// fewer cores than busy threads every hand-off and wake-up costs the trainer time. At most
// `max_slabs` slabs wait, so memory stays bounded however slow the consumer; slabs the consumer
// is done with are filled again.
//
// Take() turns whole runs of rows into float32 straight into the caller's batch (pixels.h, one
// call per run), so the float rows are written once, where they are used (Note [Byte slabs]).
//
// The layout is that of a ShardSet record (shard_set.h): the 8-byte sample id, then the fields;
// the feed reads a uint8 label field and a uint8 image field at the given offsets after the id.
//
// ReadNow does the same work on the calling thread, all of the range at once, for a caller that
// already runs beside the training thread (examples/fashion_mnist_tasks.cc reads the task it asked
// for ahead on its task-master thread): no thread is started, woken or joined per task.
//
// Errors (a missing shard or index, a corrupt or truncated shard, naming the shard and byte
// offset; a record of the wrong size) come from Take() after the rows before them, and again on
// every later call. Take() waits at most `timeout` for a slab. Not thread-safe: one consumer calls
// Take(); the destructor stops and joins the thread, which checks for that between blocks, so it
// does not wait for the range's end.
#ifndef PADDLE_DATA_TASK_FEED_H_
#define PADDLE_DATA_TASK_FEED_H_

#include <atomic>
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
#include "paddle/data/pixels.h"
#include "paddle/data/shard_reader.h"

namespace paddle {
namespace data {

struct TaskFeedLayout {
  int64_t record_bytes = 0;  // of a whole record, the 8-byte id included
  int64_t label_offset = 0;  // of the uint8 label, counted after the id
  int64_t image_offset = 0;  // of the uint8 image, counted after the id
  int64_t image_bytes = 0;   // pixels of one image
  float mean = 0, std = 1;   // a pixel p becomes (p / 255 - mean) / std (PixelNormalization)
};

struct TaskFeedOptions {
  int max_slabs = 4;  // checked slabs waiting (each is one block of records)
  absl::Duration timeout = absl::Seconds(60);  // bound on each wait in Take()
  std::shared_ptr<ShardIndexCache> index_cache;
};

class TaskFeed {
 public:
  // Starts reading and checking `range`. kInvalidArgument naming the value unless the layout's
  // fields lie inside the record and max_slabs > 0.
  static absl::StatusOr<std::unique_ptr<TaskFeed>> Start(RecordRange range, TaskFeedLayout layout,
                                                         TaskFeedOptions options = {});
  // Reads and checks all of `range` on the calling thread, with no prefetch thread and no bound
  // on the slabs (the whole range's rows, a byte a pixel, are held): for a caller that is already
  // off the training thread, so that Take() only converts. Errors as Start's.
  static absl::StatusOr<std::unique_ptr<TaskFeed>> ReadNow(RecordRange range, TaskFeedLayout layout,
                                                           TaskFeedOptions options = {});
  ~TaskFeed();
  TaskFeed(const TaskFeed&) = delete;
  TaskFeed& operator=(const TaskFeed&) = delete;

  // Writes up to `n` samples into rows of `images` (image_bytes floats each, normalized as the
  // layout says) and `labels`, and appends their ids to `ids`; returns how many, 0 once the
  // range is used up.
  absl::StatusOr<int64_t> Take(int64_t n, float* images, int64_t* labels,
                               std::vector<int64_t>* ids);

 private:
  struct Slab {
    // Allocated without being zeroed (every row is written before it is read).
    std::unique_ptr<uint8_t[]> pixels;
    size_t pixel_capacity = 0;  // bytes
    std::vector<int64_t> labels, ids;
  };
  // kInvalidArgument for a bad layout, max_slabs or range (see Start).
  static absl::Status CheckArguments(const RecordRange& range, const TaskFeedLayout& layout,
                                     const TaskFeedOptions& options);
  TaskFeed(RecordRange range, TaskFeedLayout layout, TaskFeedOptions options);
  void Produce();
  // Reads and checks the whole range; the rows before an error are queued before it returns.
  absl::Status ReadRange();
  // Checks the `n` records starting at record `first`, framed in `block` (which starts at
  // `offsets[first]`), and keeps their rows in `slab`; stops at the first bad one, leaving the
  // rows before it.
  absl::Status Decode(const char* block, const std::vector<uint64_t>& offsets, int64_t first,
                      int64_t n, Slab* slab) const;
  // A slab to fill: a used one if the consumer gave one back.
  Slab FreeSlab();
  // Waits for room (unless ReadNow fills the feed) and queues `slab`; false if the feed is being
  // destroyed.
  bool Push(Slab slab);

  const RecordRange range_;
  const TaskFeedLayout layout_;
  const TaskFeedOptions options_;
  const PixelNormalization pixels_;  // Note [One pixel conversion]
  bool bounded_ = true;              // at most max_slabs queued; false for ReadNow
  std::thread producer_;
  std::atomic<bool> cancelled_{false};  // stop_, for the producer to check without the lock
  Slab current_;                        // the consumer's: the slab it takes rows from
  size_t at_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slab> queue_ ABSL_GUARDED_BY(mu_);
  // Slabs the consumer is done with, for the producer to fill again: fresh ones cost a page
  // fault and a zero fill per 4 KiB.
  std::vector<Slab> free_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_TASK_FEED_H_
