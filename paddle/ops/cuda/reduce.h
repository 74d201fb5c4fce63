// Reductions of CUDA tensors with fp32 accumulation, deterministic (the same result on every run):
// the total or mean of all elements, and the column sums of a matrix (bias gradients). Inputs are
// contiguous CUDA tensors of fp32, fp16 or bf16 (op_checks.h); work runs on CurrentStream().
#ifndef PADDLE_OPS_CUDA_REDUCE_H_
#define PADDLE_OPS_CUDA_REDUCE_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {

// fp32 scalar (shape []) on x's device: the sum / the mean of every element (mean of none: NaN).
absl::StatusOr<Tensor> Sum(const Tensor& x);
absl::StatusOr<Tensor> Mean(const Tensor& x);
// x [rows, cols] -> [cols] in x's dtype, out[j] = sum_i x[i, j] accumulated in fp32 in row order
// (the order of paddle::ops::cpu::SumRows).
absl::StatusOr<Tensor> SumRows(const Tensor& x);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_REDUCE_H_
