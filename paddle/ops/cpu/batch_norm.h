// Batch normalization over the batch (and spatial) dimensions, per channel, for [N, C] and
// [N, C, H, W] inputs, with PyTorch's running-statistics convention.
//
// Statistics are accumulated in double in a fixed order, so results are bitwise reproducible. A
// channels-last 4-D input is normalized in place of layout and the outputs keep it.
#ifndef PADDLE_OPS_CPU_BATCH_NORM_H_
#define PADDLE_OPS_CPU_BATCH_NORM_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

struct BatchNormForwardResult {
  Tensor y;
  Tensor save_mean;    // [C], batch mean
  Tensor save_invstd;  // [C], 1 / sqrt(biased batch variance + eps)
};
// gamma, beta, running_mean, running_var: fp32 [C]. The running statistics are updated in place:
// running = (1 - momentum) * running + momentum * batch, with the unbiased batch variance. Either
// running pointer may be null (no tracking). Needs at least two values per channel.
absl::StatusOr<BatchNormForwardResult> BatchNormForwardTrain(const Tensor& x, const Tensor& gamma,
                                                             const Tensor& beta,
                                                             Tensor* running_mean,
                                                             Tensor* running_var, double momentum,
                                                             double eps);
// y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
absl::StatusOr<Tensor> BatchNormForwardEval(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, const Tensor& running_mean,
                                            const Tensor& running_var, double eps);

struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;
};
absl::StatusOr<BatchNormGrads> BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& save_mean, const Tensor& save_invstd,
                                                 const Tensor& dy);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_BATCH_NORM_H_
