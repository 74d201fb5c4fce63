// Uniform fills from the Philox stream at the reserved offset.
#include "paddle/nn/generator.h"

#include "paddle/core/philox.h"

namespace paddle::nn {

void Generator::Uniform(Tensor* t, float low, float high) {
  Philox philox(seed_, stream_);
  philox.Skip(Reserve(static_cast<uint64_t>(t->numel())));
  float* p = t->data<float>();
  for (int64_t i = 0; i < t->numel(); ++i) {
    // 24 random bits -> [0, 1).
    float u = static_cast<float>(philox.NextU32() >> 8) * (1.0f / 16777216.0f);
    p[i] = low + (high - low) * u;
  }
}

}  // namespace paddle::nn
