// Elementwise arithmetic on fp32 tensors of the same shape, the glue of the autograd layer
// (gradient accumulation, scaling, zeroing).
//
// Dense inputs are processed over their raw storage and the output keeps the first input's layout
// (Note [Activation layout] in conv2d.h); a second input in a different layout is copied into the
// first one's first. Loops run on OpenMP threads above a size threshold; each element is computed
// independently, so results do not depend on the thread count.
#ifndef PADDLE_OPS_CPU_ELEMENTWISE_H_
#define PADDLE_OPS_CPU_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

// a + b and a * b; same shape.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
// a * s.
absl::StatusOr<Tensor> Scale(const Tensor& a, float s);
// dst += alpha * src. Same shape, or (both read in row-major order) same numel with dst
// contiguous, so a flat gradient buffer can take a shaped gradient. dst must be dense.
absl::Status AddInPlace(Tensor* dst, const Tensor& src, float alpha = 1.0f);
// Every element of dst (any strides) = value.
absl::Status Fill(Tensor* dst, float value);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_ELEMENTWISE_H_
