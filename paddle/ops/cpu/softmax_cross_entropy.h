// Softmax followed by the negative log-likelihood of integer labels, fused: the classification
// loss of the training stack (PyTorch's F.cross_entropy with reduction='mean').
#ifndef PADDLE_OPS_CPU_SOFTMAX_CROSS_ENTROPY_H_
#define PADDLE_OPS_CPU_SOFTMAX_CROSS_ENTROPY_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

struct SoftmaxCrossEntropyResult {
  Tensor loss;   // fp32 scalar (shape []): mean over the N rows
  Tensor probs;  // [N, K] softmax of the logits, kept for the backward pass
};
// logits fp32 [N, K], labels int64 [N] in [0, K). Max-subtracted, so large logits do not overflow.
absl::StatusOr<SoftmaxCrossEntropyResult> SoftmaxCrossEntropyForward(const Tensor& logits,
                                                                     const Tensor& labels);
// dlogits = dloss * (probs - onehot(labels)) / N.
absl::StatusOr<Tensor> SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels,
                                                   float dloss);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_SOFTMAX_CROSS_ENTROPY_H_
