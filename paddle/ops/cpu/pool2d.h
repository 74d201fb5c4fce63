// 2-D max and average pooling on oneDNN, forward and backward.
//
// Pooling keeps the layout of its input (Note [Activation layout] in conv2d.h): a channels-last x
// gives a channels-last y and dx, an NCHW-contiguous x gives NCHW-contiguous results. Output size
// is PyTorch's floor mode: OH = (H + 2 pad_h - kernel_h) / stride_h + 1.
#ifndef PADDLE_OPS_CPU_POOL2D_H_
#define PADDLE_OPS_CPU_POOL2D_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

struct Pool2dOptions {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h = 0, pad_w = 0;
};

struct MaxPool2dResult {
  Tensor y;          // [N, C, OH, OW], x's layout
  Tensor workspace;  // uint8: oneDNN's record of each window's argmax, for the backward pass
};
// Padding never wins the max (it counts as -infinity).
absl::StatusOr<MaxPool2dResult> MaxPool2dForward(const Tensor& x, const Pool2dOptions& o);
// dy [N, C, OH, OW] in any layout. Returns dx with x's shape and layout.
absl::StatusOr<Tensor> MaxPool2dBackward(const Tensor& x, const MaxPool2dResult& fwd,
                                         const Tensor& dy, const Pool2dOptions& o);

// Average over the window's elements inside the input (padding excluded from the count).
absl::StatusOr<Tensor> AvgPool2dForward(const Tensor& x, const Pool2dOptions& o);
absl::StatusOr<Tensor> AvgPool2dBackward(const Tensor& x, const Tensor& dy, const Pool2dOptions& o);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_POOL2D_H_
