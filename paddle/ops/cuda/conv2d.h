// 2-D convolution on CUDA tensors through cuDNN: the GPU twin of paddle/ops/cpu/conv2d.h, same
// names, options, grads struct and semantics (PyTorch's nn.Conv2d cross-correlation) in namespace
// paddle::ops::cuda.
//
// Layout: the logical shapes are the CPU op's ([N, C, H, W] in, [N, K, OH, OW] out, w [K, C, R,
// S]), but as every GPU op (op_checks.h) these take contiguous NCHW tensors and return contiguous
// NCHW tensors, not the CPU op's channels-last ones. fp32 only, with cuDNN restricted to FMA math
// (no TF32), so results agree with the CPU op to about 1e-6 relative per product. Among the
// algorithms cuDNN's heuristics offer, a deterministic one is preferred, so the backward pass gives
// the same bits on every run. Workspace comes from the CUDA caching allocator. Asynchronous on
// CurrentStream() (handles.h).
#ifndef PADDLE_OPS_CUDA_CONV2D_H_
#define PADDLE_OPS_CUDA_CONV2D_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/conv2d.h"

namespace paddle {
namespace ops {
namespace cuda {

using Conv2dOptions = cpu::Conv2dOptions;
using Conv2dGrads = cpu::Conv2dGrads;  // dx [N, C, H, W], dw [K, C, R, S], db [K], all contiguous

// x [N, C, H, W], w [K, C, R, S], b [K] or nullptr. Returns y [N, K, OH, OW] with
// OH = (H + 2 pad_h - R) / stride_h + 1 (floor), likewise OW.
absl::StatusOr<Tensor> Conv2dForward(const Tensor& x, const Tensor& w, const Tensor* b,
                                     const Conv2dOptions& o);

// dy [N, K, OH, OW]. dw always; dx unless !need_dx, db unless !need_db (left undefined).
absl::StatusOr<Conv2dGrads> Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           const Conv2dOptions& o, bool need_dx, bool need_db);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_CONV2D_H_
