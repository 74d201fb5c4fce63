// The SGD update on CUDA tensors, paddle/optim/sgd.h's math (torch.optim.SGD: momentum,
// dampening, Nesterov, weight decay) in one fused pass over fp32 parameter, gradient and momentum
// buffer (kernels::SgdParams in kernels.h states it). Asynchronous on CurrentStream().
#ifndef PADDLE_OPS_CUDA_SGD_H_
#define PADDLE_OPS_CUDA_SGD_H_

#include "absl/status/status.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cuda/kernels.h"

namespace paddle {
namespace ops {
namespace cuda {

// w, g and (momentum != 0) momentum_buf: contiguous fp32 CUDA tensors of one shape and device.
// momentum_buf may be null when p.momentum == 0. Checks the options as paddle::optim::Sgd does.
absl::Status SgdUpdate(Tensor* w, const Tensor& g, Tensor* momentum_buf,
                       const kernels::SgdParams& p);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_SGD_H_
