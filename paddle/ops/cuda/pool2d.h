// 2-D max and average pooling on CUDA tensors through cuDNN: the GPU twin of
// paddle/ops/cpu/pool2d.h, same names, options, result struct and semantics in namespace
// paddle::ops::cuda.
//
// Contiguous NCHW fp32 in and out (op_checks.h). Output size is PyTorch's floor mode:
// OH = (H + 2 pad_h - kernel_h) / stride_h + 1. Max pooling never lets padding win; average pooling
// divides by the number of window elements inside the input (padding excluded), as on the CPU.
//
// Note [GPU max-pool workspace]
// The CPU op keeps oneDNN's argmax record in MaxPool2dResult::workspace. cuDNN needs none: its
// backward pass finds each window's maximum again from x and the forward output y (fwd.y) and
// routes the gradient to that element (CUDNN_POOLING_MAX_DETERMINISTIC). That is the CPU's choice
// whenever a window's maximum is unique; with ties the two may pick different elements. So on the
// GPU `workspace` stays undefined and MaxPool2dBackward reads fwd.y; the struct is the CPU's so
// callers hold either result the same way.
#ifndef PADDLE_OPS_CUDA_POOL2D_H_
#define PADDLE_OPS_CUDA_POOL2D_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/pool2d.h"

namespace paddle {
namespace ops {
namespace cuda {

using Pool2dOptions = cpu::Pool2dOptions;
using MaxPool2dResult = cpu::MaxPool2dResult;  // y [N, C, OH, OW]; workspace undefined (see Note)

// x [N, C, H, W].
absl::StatusOr<MaxPool2dResult> MaxPool2dForward(const Tensor& x, const Pool2dOptions& o);
// fwd: this op's forward result for x. dy [N, C, OH, OW]. Returns dx [N, C, H, W].
absl::StatusOr<Tensor> MaxPool2dBackward(const Tensor& x, const MaxPool2dResult& fwd,
                                         const Tensor& dy, const Pool2dOptions& o);

absl::StatusOr<Tensor> AvgPool2dForward(const Tensor& x, const Pool2dOptions& o);
absl::StatusOr<Tensor> AvgPool2dBackward(const Tensor& x, const Tensor& dy, const Pool2dOptions& o);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_POOL2D_H_
