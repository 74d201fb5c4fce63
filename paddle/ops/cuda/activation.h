// Activation functions on CUDA tensors, forward and backward: the GPU twins of
// paddle/ops/cpu/activation.h (plus tanh and sigmoid), same names and semantics, in namespace
// paddle::ops::cuda. fp32, fp16 or bf16 storage with fp32 math; contiguous CUDA tensors in,
// new contiguous tensors out (op_checks.h); asynchronous on CurrentStream().
#ifndef PADDLE_OPS_CUDA_ACTIVATION_H_
#define PADDLE_OPS_CUDA_ACTIVATION_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {

// y = max(x, 0); dx = dy where y > 0, else 0 (takes the forward output).
absl::StatusOr<Tensor> ReluForward(const Tensor& x);
absl::StatusOr<Tensor> ReluBackward(const Tensor& y, const Tensor& dy);

// y = x Phi(x) (exact, erf); dx = dy (Phi(x) + x phi(x)) (takes the forward input).
absl::StatusOr<Tensor> GeluForward(const Tensor& x);
absl::StatusOr<Tensor> GeluBackward(const Tensor& x, const Tensor& dy);

// y = tanh(x); dx = dy (1 - y^2) (takes the forward output).
absl::StatusOr<Tensor> TanhForward(const Tensor& x);
absl::StatusOr<Tensor> TanhBackward(const Tensor& y, const Tensor& dy);

// y = 1 / (1 + e^-x); dx = dy y (1 - y) (takes the forward output).
absl::StatusOr<Tensor> SigmoidForward(const Tensor& x);
absl::StatusOr<Tensor> SigmoidBackward(const Tensor& y, const Tensor& dy);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_ACTIVATION_H_
