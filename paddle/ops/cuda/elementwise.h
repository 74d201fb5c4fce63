// Elementwise arithmetic on CUDA tensors: the GPU twins of paddle/ops/cpu/elementwise.h, same
// names and semantics, in namespace paddle::ops::cuda. Storage may be fp32, fp16 or bf16 (math
// in fp32, one rounding on store); inputs must be contiguous CUDA tensors of one device and dtype
// (op_checks.h); outputs are new contiguous tensors on that device. Work runs on CurrentStream()
// (handles.h) and is asynchronous.
#ifndef PADDLE_OPS_CUDA_ELEMENTWISE_H_
#define PADDLE_OPS_CUDA_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {

// a + b, a - b and a * b; same shape.
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
// a * s.
absl::StatusOr<Tensor> Scale(const Tensor& a, float s);
// dst += alpha * src: same shape, or same numel (both contiguous, read in row-major order).
absl::Status AddInPlace(Tensor* dst, const Tensor& src, float alpha = 1.0f);
// Every element of dst = value.
absl::Status Fill(Tensor* dst, float value);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_ELEMENTWISE_H_
