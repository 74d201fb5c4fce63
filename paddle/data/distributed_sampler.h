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
// world_size = 1 makes it the single-process shuffler; shuffle = false keeps the natural order.
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

  // kInvalidArgument naming the values unless dataset_size >= 0, world_size > 0 and
  // 0 <= rank < world_size.
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size, int rank, int world_size,
                                                   uint64_t seed, bool shuffle = true,
                                                   bool drop_last = false);

  // Starts epoch `epoch` (>= 0) from its first sample.
  void SetEpoch(int64_t epoch);
  // Continues epoch `state.epoch` after `state.offset` samples; kInvalidArgument naming the values
  // unless epoch >= 0 and 0 <= offset <= NumSamples().
  absl::Status Restore(const State& state);
  State state() const { return state_; }

  // Indices per rank per epoch: ceil(size / world), or floor(size / world) with drop_last.
  int64_t NumSamples() const;
  // NumSamples() * world_size: the padded (or cut) length of the epoch's permutation.
  int64_t TotalSize() const { return NumSamples() * world_size_; }
  // This rank's indices for the current epoch, after the first state().offset of them.
  std::vector<int64_t> Indices() const;

  int64_t dataset_size() const { return dataset_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }

 private:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed, bool shuffle,
                     bool drop_last)
      : dataset_size_(dataset_size),
        rank_(rank),
        world_size_(world_size),
        seed_(seed),
        shuffle_(shuffle),
        drop_last_(drop_last) {}

  int64_t dataset_size_;
  int rank_;
  int world_size_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  State state_;
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_DISTRIBUTED_SAMPLER_H_
