// Generator: the random stream a model draws from, for initialisation and dropout masks.
//
// A Philox stream (paddle/core/philox.h) identified by (seed, stream) plus an offset that only
// grows: each draw reserves the next words, so the state is three integers that a checkpoint
// saves and restores exactly. Initialisation uses stream 0 with the same seed on every rank
// (identical replicas); dropout can use a rank-specific stream.
#ifndef PADDLE_NN_GENERATOR_H_
#define PADDLE_NN_GENERATOR_H_

#include <cstdint>

#include "paddle/core/tensor.h"

namespace paddle::nn {

class Generator {
 public:
  explicit Generator(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  // Reserves `words` 32-bit words; returns the offset of the first.
  uint64_t Reserve(uint64_t words) {
    uint64_t first = offset_;
    offset_ += words;
    return first;
  }
  // Fills a contiguous fp32 tensor with uniform values in [low, high).
  void Uniform(Tensor* t, float low, float high);

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t offset_ = 0;
};

}  // namespace paddle::nn

#endif  // PADDLE_NN_GENERATOR_H_
