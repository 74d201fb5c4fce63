// Global batches split over the ranks of the moment; see global_batch.h.
#include "paddle/parallel/global_batch.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "paddle/data/distributed_sampler.h"

namespace paddle {

absl::StatusOr<BatchShare> ShareOfGlobalBatch(int64_t epoch_size, int64_t position,
                                              int64_t global_batch, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world || global_batch < 1 || position < 0 ||
      position >= epoch_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ShareOfGlobalBatch: need 0 <= rank < world, global_batch > 0 and 0 <= position < "
        "epoch_size; got rank %d, world %d, global_batch %d, position %d, epoch_size %d",
        rank, world, global_batch, position, epoch_size));
  }
  BatchShare share;
  share.global_size = std::min(global_batch, epoch_size - position);
  const int64_t base = share.global_size / world;
  const int64_t extra = share.global_size % world;
  share.count = base + (rank < extra ? 1 : 0);
  share.begin = rank * base + std::min<int64_t>(rank, extra);
  return share;
}

int64_t StepsPerEpoch(int64_t epoch_size, int64_t global_batch) {
  return global_batch > 0 ? (epoch_size + global_batch - 1) / global_batch : 0;
}

absl::StatusOr<std::vector<int64_t>> EpochOrder(int64_t dataset_size, uint64_t seed,
                                                int64_t epoch) {
  absl::StatusOr<data::DistributedSampler> sampler =
      data::DistributedSampler::Create(dataset_size, /*rank=*/0, /*world_size=*/1, seed);
  if (!sampler.ok()) return sampler.status();
  if (epoch < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("EpochOrder: epoch %d < 0", epoch));
  }
  sampler->SetEpoch(epoch);
  return sampler->Indices();
}

}  // namespace paddle
