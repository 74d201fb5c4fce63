// Inverted dropout with a counter-based mask.
//
// Element i of the mask is decided by 32-bit word `offset + i` of paddle::Philox(seed, stream):
// kept when word >= p * 2^32. The mask is therefore a pure function of (seed, stream, offset), the
// same whatever the thread count, and a caller can give each rank its own stream and advance
// `offset` by numel per call to draw fresh masks without any generator state.
#ifndef PADDLE_OPS_CPU_DROPOUT_H_
#define PADDLE_OPS_CPU_DROPOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

struct DropoutResult {
  Tensor y;     // x * mask / (1 - p), x's layout
  Tensor mask;  // uint8, 1 = kept, x's layout
};
// p in [0, 1).
absl::StatusOr<DropoutResult> DropoutForward(const Tensor& x, double p, uint64_t seed,
                                             uint64_t stream, uint64_t offset);
// dx = dy * mask / (1 - p).
absl::StatusOr<Tensor> DropoutBackward(const Tensor& mask, const Tensor& dy, double p);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_DROPOUT_H_
