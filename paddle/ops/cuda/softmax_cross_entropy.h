// Softmax followed by the negative log-likelihood of integer labels, fused, on CUDA tensors: the
// GPU twin of paddle/ops/cpu/softmax_cross_entropy.h (PyTorch's F.cross_entropy with
// reduction='mean'), same names and semantics in namespace paddle::ops::cuda. One block per row,
// max-subtracted, fp32 throughout.
#ifndef PADDLE_OPS_CUDA_SOFTMAX_CROSS_ENTROPY_H_
#define PADDLE_OPS_CUDA_SOFTMAX_CROSS_ENTROPY_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {

struct SoftmaxCrossEntropyResult {
  Tensor loss;   // fp32 scalar (shape []) on the device: mean over the N rows
  Tensor probs;  // [N, K] softmax of the logits, kept for the backward pass
};
// logits fp32 [N, K], labels int64 [N] in [0, K), both contiguous on one CUDA device. The label
// range is checked on the device; reading the verdict back synchronizes CurrentStream() (the one
// synchronization of a training step's loss), and a label outside [0, K) is kInvalidArgument
// naming the first bad row.
absl::StatusOr<SoftmaxCrossEntropyResult> SoftmaxCrossEntropyForward(const Tensor& logits,
                                                                     const Tensor& labels);
// dlogits = dloss * (probs - onehot(labels)) / N. Asynchronous: labels are not checked again
// (the forward pass did); a row with a label outside [0, K) comes out NaN.
absl::StatusOr<Tensor> SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels,
                                                   float dloss);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_SOFTMAX_CROSS_ENTROPY_H_
