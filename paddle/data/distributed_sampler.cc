#include "paddle/data/distributed_sampler.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/logging.h"
#include "paddle/core/philox.h"

namespace paddle {
namespace data {
namespace {

// A draw in [0, bound) from 64 random bits by multiply-and-shift (Lemire). It skips the
// rejection step: the bias is below bound / 2^64, far under anything a shuffle could show, and
// every draw costs exactly two Philox words, so the stream position never depends on the data.
int64_t UniformBelow(Philox& rng, int64_t bound) {
  const unsigned __int128 product =
      static_cast<unsigned __int128>(rng.NextU64()) * static_cast<uint64_t>(bound);
  return static_cast<int64_t>(product >> 64);
}

}  // namespace

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int64_t dataset_size, int rank,
                                                              int world_size, uint64_t seed,
                                                              bool shuffle, bool drop_last) {
  if (world_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: world_size ", world_size, " must be positive"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: rank ", rank,
                                                   " is outside [0, world_size ", world_size, ")"));
  }
  if (dataset_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: dataset_size ", dataset_size, " is negative"));
  }
  return DistributedSampler(dataset_size, rank, world_size, seed, shuffle, drop_last);
}

void DistributedSampler::SetEpoch(int64_t epoch) {
  PADDLE_CHECK(epoch >= 0) << "DistributedSampler::SetEpoch(" << epoch << "): negative epoch";
  state_ = State{epoch, 0};
}

absl::Status DistributedSampler::Restore(const State& state) {
  if (state.epoch < 0 || state.offset < 0 || state.offset > NumSamples()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler::Restore: state (epoch ", state.epoch, ", offset ", state.offset,
        ") needs epoch >= 0 and offset in [0, ", NumSamples(), "], the samples per rank (",
        dataset_size_, " samples over world_size ", world_size_, drop_last_ ? ", drop_last" : "",
        "); was the checkpoint written for another data set "
        "or world size?"));
  }
  state_ = state;
  return absl::OkStatus();
}

int64_t DistributedSampler::NumSamples() const {
  return drop_last_ ? dataset_size_ / world_size_ : (dataset_size_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    Philox rng(seed_, static_cast<uint64_t>(state_.epoch));
    for (int64_t i = dataset_size_ - 1; i > 0; --i) {
      std::swap(order[i], order[UniformBelow(rng, i + 1)]);
    }
  }
  // Pad by repeating the head (cyclically, should the padding exceed the data set) or cut.
  const int64_t total = TotalSize();
  order.reserve(total);
  for (int64_t k = dataset_size_; k < total; ++k) order.push_back(order[k % dataset_size_]);
  order.resize(total);

  std::vector<int64_t> mine;
  mine.reserve(NumSamples() - state_.offset);
  for (int64_t i = state_.offset; i < NumSamples(); ++i)
    mine.push_back(order[i * world_size_ + rank_]);
  return mine;
}

}  // namespace data
}  // namespace paddle
