// Batch normalization on CUDA tensors through cuDNN (spatial mode): the GPU twin of
// paddle/ops/cpu/batch_norm.h, same names, result structs and semantics in namespace
// paddle::ops::cuda, for [N, C] and [N, C, H, W] inputs with PyTorch's running-statistics
// convention.
//
// Contiguous fp32 in and out (op_checks.h). cuDNN accumulates in fp32 in its own order, so results
// agree with the CPU op (double accumulation) to a few fp32 ulps per element, not bitwise.
#ifndef PADDLE_OPS_CUDA_BATCH_NORM_H_
#define PADDLE_OPS_CUDA_BATCH_NORM_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/batch_norm.h"

namespace paddle {
namespace ops {
namespace cuda {

using BatchNormForwardResult = cpu::BatchNormForwardResult;  // y; save_mean, save_invstd [C]
using BatchNormGrads = cpu::BatchNormGrads;                  // dx, dgamma [C], dbeta [C]

// gamma, beta, running_mean, running_var: CUDA fp32 [C] on x's device. The running statistics are
// updated in place: running = (1 - momentum) * running + momentum * batch, with the unbiased batch
// variance. Either running pointer may be null (no tracking). Needs at least two values per
// channel. momentum in [0, 1]; eps > 0.
absl::StatusOr<BatchNormForwardResult> BatchNormForwardTrain(const Tensor& x, const Tensor& gamma,
                                                             const Tensor& beta,
                                                             Tensor* running_mean,
                                                             Tensor* running_var, double momentum,
                                                             double eps);
// y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
absl::StatusOr<Tensor> BatchNormForwardEval(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, const Tensor& running_mean,
                                            const Tensor& running_var, double eps);

// save_mean, save_invstd: BatchNormForwardTrain's for this x. dy has x's shape.
absl::StatusOr<BatchNormGrads> BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& save_mean, const Tensor& save_invstd,
                                                 const Tensor& dy);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_BATCH_NORM_H_
