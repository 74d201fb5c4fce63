// Single-precision matrix multiply on 2-D tensors, backed by OpenBLAS.
#ifndef PADDLE_OPS_CPU_GEMM_H_
#define PADDLE_OPS_CPU_GEMM_H_

#include "absl/status/status.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

// c = alpha * op(a) * op(b) + beta * c, op(x) = x^T when trans_x. a, b, c: fp32, 2-D; c must be
// defined with the result's shape. a and b may be transposed views (row stride 1); c must have
// unit column stride. With beta == 0, c is not read (NaNs in c do not propagate).
absl::Status Gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                  float beta, Tensor* c);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_GEMM_H_
