// Activation functions, forward and backward. Outputs keep the input's layout (Note [Activation
// layout] in conv2d.h).
#ifndef PADDLE_OPS_CPU_ACTIVATION_H_
#define PADDLE_OPS_CPU_ACTIVATION_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

// y = max(x, 0).
absl::StatusOr<Tensor> ReluForward(const Tensor& x);
// dx = dy where y > 0, else 0. Takes the forward output (enough to decide, and lets x be freed).
absl::StatusOr<Tensor> ReluBackward(const Tensor& y, const Tensor& dy);

// y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): the exact form, PyTorch's default.
absl::StatusOr<Tensor> GeluForward(const Tensor& x);
// dx = dy * (Phi(x) + x phi(x)).
absl::StatusOr<Tensor> GeluBackward(const Tensor& x, const Tensor& dy);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_ACTIVATION_H_
