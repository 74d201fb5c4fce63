#include "paddle/data/distributed_sampler.h"

#include <algorithm>
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
                                                              bool shuffle, bool drop_last,
                                                              int64_t global_batch) {
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
  if (global_batch < 0 || (global_batch > 0 && global_batch < world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: global_batch ", global_batch,
        global_batch < 0 ? " is negative"
                         : absl::StrCat(" is smaller than world_size ", world_size,
                                        ": some ranks would read no sample in a step")));
  }
  return DistributedSampler(dataset_size, rank, world_size, seed, shuffle, drop_last, global_batch);
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

int64_t DistributedSampler::TotalSize() const {
  if (global_batch_ == 0 || global_batch_ % world_size_ == 0) {
    const int64_t per_rank =
        drop_last_ ? dataset_size_ / world_size_ : (dataset_size_ + world_size_ - 1) / world_size_;
    return per_rank * world_size_;
  }
  // Note [Uneven shares]: only a last step shorter than the world is padded or cut.
  const int64_t tail = dataset_size_ % global_batch_;
  if (tail == 0 || tail >= world_size_) return dataset_size_;
  return drop_last_ ? dataset_size_ - tail : dataset_size_ + world_size_ - tail;
}

int64_t DistributedSampler::NumSamples() const {
  const int64_t total = TotalSize();
  if (global_batch_ == 0) return total / world_size_;
  return total / global_batch_ * Share(global_batch_) + Share(total % global_batch_);
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

  // Steps of the global batch (one step of the whole list without one): this rank's positions in
  // each, in order, after the first state_.offset of them.
  std::vector<int64_t> mine;
  mine.reserve(NumSamples() - state_.offset);
  const int64_t step = global_batch_ > 0 ? global_batch_ : std::max<int64_t>(total, 1);
  int64_t skip = state_.offset;
  for (int64_t base = 0; base < total; base += step) {
    const int64_t end = std::min(base + step, total);
    for (int64_t p = base + rank_; p < end; p += world_size_) {
      if (skip > 0) {
        --skip;
      } else {
        mine.push_back(order[p]);
      }
    }
  }
  return mine;
}

}  // namespace data
}  // namespace paddle
