// 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d) on oneDNN, forward and backward.
//
// Note [Activation layout]
// Tensors keep logical NCHW shapes everywhere, but the convolutions produce channels-last
// activations: an [N, C, H, W] tensor with strides [H*W*C, 1, W*C, C]. oneDNN's AVX-512
// convolutions run natively on that layout, while a plain NCHW result would need a reorder of
// every activation and gradient (a full extra pass over memory) in each direction. Elementwise
// kernels and pooling keep the layout they are given, so a conv -> ReLU -> conv -> pool chain never
// reorders; code that needs NCHW-contiguous data (flatten before a linear layer) calls
// Contiguous(), which copies once. Inputs in any dense layout are accepted; a non-channels-last
// input is reordered first. The weights stay [K, C, R, S] contiguous, as the optimizer sees them;
// they are reordered to oneDNN's blocked format on each call (small next to the activations).
#ifndef PADDLE_OPS_CPU_CONV2D_H_
#define PADDLE_OPS_CPU_CONV2D_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

// x [N, C, H, W], w [K, C, R, S], b [K] or nullptr. Returns y [N, K, OH, OW] channels-last, with
// OH = (H + 2 pad_h - R) / stride_h + 1 (floor), likewise OW.
absl::StatusOr<Tensor> Conv2dForward(const Tensor& x, const Tensor& w, const Tensor* b,
                                     const Conv2dOptions& o);

struct Conv2dGrads {
  Tensor dx;  // [N, C, H, W] channels-last; undefined unless need_dx
  Tensor dw;  // [K, C, R, S] contiguous
  Tensor db;  // [K]; undefined unless need_db
};
absl::StatusOr<Conv2dGrads> Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           const Conv2dOptions& o, bool need_dx, bool need_db);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_CONV2D_H_
