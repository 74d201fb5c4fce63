// Fully connected layer on CUDA tensors through cuBLAS: the GPU twin of paddle/ops/cpu/linear.h,
// y = x w^T + b with PyTorch's nn.Linear convention (w is [out, in]), same names and semantics in
// namespace paddle::ops::cuda.
//
// x, w, b and dy share one dtype: fp32, or bf16/fp16 storage with fp32 accumulation
// (cublasGemmEx with CUBLAS_COMPUTE_32F); outputs have that dtype. For fp32, GemmOptions can let
// cuBLAS use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissa inputs, about 1e-3
// relative error) instead of full fp32 FMAs. Contiguous CUDA tensors of one device in, new
// contiguous tensors out (op_checks.h); asynchronous on CurrentStream() (handles.h).
#ifndef PADDLE_OPS_CUDA_LINEAR_H_
#define PADDLE_OPS_CUDA_LINEAR_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {

struct GemmOptions {
  bool allow_tf32 = false;  // fp32 only: CUBLAS_COMPUTE_32F_FAST_TF32
};

// x [N, in], w [out, in], b [out] or nullptr; returns y [N, out].
absl::StatusOr<Tensor> LinearForward(const Tensor& x, const Tensor& w, const Tensor* b,
                                     const GemmOptions& options = {});

struct LinearGrads {
  Tensor dx;  // [N, in]; undefined unless need_dx
  Tensor dw;  // [out, in]
  Tensor db;  // [out]; undefined unless need_db. Column sums of dy in row order (reduce.h).
};
// dy [N, out].
absl::StatusOr<LinearGrads> LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           bool need_dx, bool need_db,
                                           const GemmOptions& options = {});

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_LINEAR_H_
