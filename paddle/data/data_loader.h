// DataLoader: batches of one rank's samples, gathered ahead of time on a background thread.
//
// The DistributedSampler decides which samples this rank reads in an epoch; the loader cuts that
// index list into batches of `batch_size`, copies each batch's rows out of the data set into new
// contiguous tensors (one memcpy per row) and hands them to the training loop through a bounded
// queue of `prefetch_depth` batches, so the gather of batch k + 1 overlaps the step on batch k.
//
//   auto sampler = DistributedSampler::Create(dataset.size(), rank, world, seed);
//   sampler->Restore(checkpoint_state);           // optional: resume mid-epoch
//   auto loader = DataLoader::Create(dataset, *sampler, /*batch_size=*/64);
//   for (int64_t epoch = first; epoch < epochs; ++epoch) {
//     (*loader)->StartEpoch(epoch);
//     while (true) {
//       absl::StatusOr<std::optional<Batch>> batch = (*loader)->Next();
//       if (!batch.ok()) return batch.status();
//       if (!batch->has_value()) break;           // end of epoch
//       ... train on (*batch)->images, (*batch)->labels; checkpoint (*loader)->state() ...
//     }
//   }
//
// Note [Deterministic batches]: the batches are a function of (seed, epoch, rank, world size,
// batch size, drop_last) and the restored offset only. One producer thread builds them in index
// order and the queue is FIFO, so neither the prefetch depth nor how fast the consumer runs can
// change what Next() returns.
//
// Not thread-safe: call StartEpoch, Next and state from one thread (the training loop); the
// producer thread is internal.
//
// Next() has no timeout, unlike the project's other blocking calls: it waits only on a local
// thread that always makes progress (memcpy, no I/O, no peers) or reports an error.
#ifndef PADDLE_DATA_DATA_LOADER_H_
#define PADDLE_DATA_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/allocator.h"
#include "paddle/core/tensor.h"
#include "paddle/data/distributed_sampler.h"
#include "paddle/data/fashion_mnist.h"

namespace paddle {
namespace data {

struct Batch {
  Tensor images;  // [B, ...] the rows of dataset.images, contiguous, B <= batch_size
  Tensor labels;  // [B, ...] the rows of dataset.labels
  // Position of the batch in this rank's epoch. A run resumed at offset k numbers its first batch
  // k / batch_size, so a checkpoint taken between batches resumes with the same numbers.
  int64_t index = 0;
};

class DataLoader {
 public:
  using State = DistributedSampler::State;

  // `dataset` may hold any CPU tensors whose first dimension is the sample (non-contiguous ones
  // are copied once, here); batches are allocated from `allocator`. kInvalidArgument naming the
  // values unless batch_size > 0, prefetch_depth > 0, images and labels are defined CPU tensors
  // with the same first dimension, and it equals sampler.dataset_size().
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(
      Dataset dataset, DistributedSampler sampler, int64_t batch_size, bool drop_last = false,
      int prefetch_depth = 2, Allocator* allocator = CpuAllocator());
  // Stops the producer, mid-epoch or not, and joins it.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // (Re)starts the pipeline at the first sample of `epoch` (>= 0), dropping any batches still
  // queued. If the sampler was restored to (epoch, offset) and not started since, the epoch
  // starts after `offset` samples instead; later calls start from the beginning.
  void StartEpoch(int64_t epoch);

  // The next batch of the epoch; nullopt once the epoch is done (the last batch is partial unless
  // drop_last, which drops it); an error the producer met (after the batches before it, and
  // again on every call until StartEpoch); kFailedPrecondition before the first StartEpoch.
  absl::StatusOr<std::optional<Batch>> Next();

  // For checkpoints: the epoch and the samples of it that Next() has returned (counting a
  // restored offset), ready for DistributedSampler::Restore.
  State state() const;

  // Batches in the current epoch from its start offset.
  int64_t NumBatches() const { return num_batches_; }
  int64_t batch_size() const { return batch_size_; }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  DataLoader(Dataset dataset, DistributedSampler sampler, int64_t batch_size, bool drop_last,
             int prefetch_depth, Allocator* allocator);

  // The producer thread: gathers the `num_batches` batches of `indices` (numbering them from
  // `first_index`) until done, stopped or failed.
  void Produce(std::vector<int64_t> indices, int64_t num_batches, int64_t first_index);
  absl::StatusOr<Batch> Gather(const int64_t* indices, int64_t count, int64_t index) const;
  void StopProducer();

  const Dataset dataset_;
  DistributedSampler sampler_;
  const int64_t batch_size_;
  const bool drop_last_;
  const int prefetch_depth_;
  Allocator* const allocator_;
  int64_t image_row_bytes_ = 0;
  int64_t label_row_bytes_ = 0;
  // Owned by the consumer thread: only StartEpoch changes them.
  int64_t num_batches_ = 0;
  std::thread producer_;

  // std::mutex rather than absl::Mutex so that --config=tsan checks this locking: Debian's
  // Abseil is not built for TSan (Note [Locks and ThreadSanitizer] in
  // paddle/collective/transport/tcp/tcp_request.h).
  mutable std::mutex mu_;
  std::condition_variable cv_;  // notified on every change below
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // the producer has queued its last batch
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t start_offset_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;  // samples Next() returned since StartEpoch
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_DATA_LOADER_H_
