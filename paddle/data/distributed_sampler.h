// DistributedSampler: which samples of a data set each data-parallel rank reads, epoch by epoch.
//
// The semantics are PyTorch's torch.utils.data.DistributedSampler, so a model trained here sees
// the same kind of schedule:
//   1. Each epoch shuffles [0, dataset_size) with a Fisher-Yates shuffle driven by
//      Philox(seed, epoch). Every rank draws the same words and so holds the same permutation,
//      without any communication; a new epoch is a new Philox stream, hence a new order.
//   2. Without drop_last the list is padded to a multiple of world_size by repeating its head
//      (a few samples are seen twice per epoch); with drop_last its tail is cut instead (a few
//      samples are skipped this epoch).
//   3. Rank r takes positions r, r + world, r + 2 * world, ...: NumSamples() indices, the same
//      count on every rank, so all ranks run the same number of steps and no collective waits on
//      a rank that ran out of data.
//   4. With a global batch B (Note [Uneven shares]), the list is read B positions per step and
//      rank r takes the step's positions j with j % world == r: LocalBatch() samples per step,
//      B / world, one more on the first B % world ranks. When world divides B this is exactly the
//      order of step 3.
// world_size = 1 makes it the single-process shuffler; shuffle = false keeps the natural order.
//
// Note [Uneven shares]
// A job's global batch need not be a multiple of its world size (128 samples on 3 workers): the
// ranks then read different counts per step (43, 43, 42) and weight their mean loss by their
// share, count x world / B, so that DDP's average over ranks is the global batch's mean, as in
// the elastic path (Note [Short steps] in examples/fashion_mnist_tasks.cc). Every step covers
// B consecutive positions of the epoch's permutation, the same ones whatever the world size, so
// a 3-worker job steps on the same batches as a 1-worker job. The epoch's last step is short
// (T % B positions) and split by the same rule. T is the data set's size, padded (cut, with
// drop_last) only where that step would leave a rank without a sample, so that every rank runs
// the same number of steps; where world divides B, T is step 2's, and the order step 3's.
//
// Resuming: State is (epoch, offset), the offset counting the samples of this epoch this rank has
// already consumed. Restore(state) makes Indices() skip them, so a job restarted from a
// checkpoint continues with exactly the samples it had not seen.
#ifndef PADDLE_DATA_DISTRIBUTED_SAMPLER_H_
#define PADDLE_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paddle {
namespace data {

class DistributedSampler {
 public:
  struct State {
    int64_t epoch = 0;
    int64_t offset = 0;  // samples of this epoch already consumed by this rank
    friend bool operator==(const State& a, const State& b) {
      return a.epoch == b.epoch && a.offset == b.offset;
    }
  };

  // kInvalidArgument naming the values unless dataset_size >= 0, world_size > 0,
  // 0 <= rank < world_size and global_batch is 0 (none: step 3 above) or at least world_size.
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size, int rank, int world_size,
                                                   uint64_t seed, bool shuffle = true,
                                                   bool drop_last = false,
                                                   int64_t global_batch = 0);

  // Starts epoch `epoch` (>= 0) from its first sample.
  void SetEpoch(int64_t epoch);
  // Continues epoch `state.epoch` after `state.offset` samples; kInvalidArgument naming the values
  // unless epoch >= 0 and 0 <= offset <= NumSamples().
  absl::Status Restore(const State& state);
  State state() const { return state_; }

  // Indices of this rank per epoch: ceil(size / world), or floor(size / world) with drop_last;
  // with a global batch, this rank's shares of the steps of TotalSize().
  int64_t NumSamples() const;
  // The padded (or cut) length of the epoch's permutation, over all ranks.
  int64_t TotalSize() const;
  // This rank's samples in a full step of the global batch (0 without one).
  int64_t LocalBatch() const { return Share(global_batch_); }
  // This rank's indices for the current epoch, after the first state().offset of them.
  std::vector<int64_t> Indices() const;

  int64_t dataset_size() const { return dataset_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed, bool shuffle,
                     bool drop_last, int64_t global_batch)
      : dataset_size_(dataset_size),
        rank_(rank),
        world_size_(world_size),
        seed_(seed),
        shuffle_(shuffle),
        drop_last_(drop_last),
        global_batch_(global_batch) {}

  // This rank's positions among a step's first `n`: those j < n with j % world == rank.
  int64_t Share(int64_t n) const { return n / world_size_ + (rank_ < n % world_size_ ? 1 : 0); }

  int64_t dataset_size_;
  int rank_;
  int world_size_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  int64_t global_batch_;
  State state_;
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_DISTRIBUTED_SAMPLER_H_
