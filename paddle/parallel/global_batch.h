// Global batches: how a fixed global batch is split over however many ranks there are now.
//
// With elastic training the world size changes while the global batch (and with it the learning
// rate and the meaning of a step) stays fixed. Each step consumes the next `global_batch` samples
// of the epoch's permutation (EpochOrder: the same on every rank, from (seed, epoch) alone), or
// what is left of the epoch; rank r of `world` takes a contiguous share of it, floor(B / world)
// samples, plus one for the first B % world ranks. The data position is the global count of the
// epoch's samples consumed (Note [Global data position] in elastic_state.cc).
#ifndef PADDLE_PARALLEL_GLOBAL_BATCH_H_
#define PADDLE_PARALLEL_GLOBAL_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace paddle {

struct BatchShare {
  int64_t global_size = 0;  // samples of this step over all ranks
  int64_t begin = 0;        // this rank's first sample, counted from the step's first
  int64_t count = 0;        // this rank's samples (0 when the batch is smaller than the world)
};

// Rank `rank`'s share of the step that starts at `position` of an epoch of `epoch_size` samples.
// kInvalidArgument naming the values unless 0 <= rank < world, global_batch > 0 and
// 0 <= position < epoch_size.
absl::StatusOr<BatchShare> ShareOfGlobalBatch(int64_t epoch_size, int64_t position,
                                              int64_t global_batch, int rank, int world);

// Steps an epoch of `epoch_size` samples takes at `global_batch` (the last one may be partial).
int64_t StepsPerEpoch(int64_t epoch_size, int64_t global_batch);

// The epoch's sample order: a permutation of [0, dataset_size), a function of (seed, epoch) only
// (DistributedSampler's shuffle with one rank).
absl::StatusOr<std::vector<int64_t>> EpochOrder(int64_t dataset_size, uint64_t seed, int64_t epoch);

}  // namespace paddle

#endif  // PADDLE_PARALLEL_GLOBAL_BATCH_H_
