// Batch norm as cuDNN's legacy spatial batch-norm calls (Note [cuDNN legacy ops] in pool2d.cc).
//
// An [N, C] x is described to cuDNN as [N, C, 1, 1], so both ranks normalize per channel over all
// other dimensions. cuDNN's conventions are PyTorch's, hence the CPU op's: exponentialAverageFactor
// is the momentum, the running variance takes the unbiased batch variance, and the saved inverse
// variance is 1 / sqrt(biased variance + eps).
#include "paddle/ops/cuda/batch_norm.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/cudnn_descriptors.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // Note [cuDNN legacy ops]

namespace paddle {
namespace ops {
namespace cuda {
namespace {

using internal::CheckCudaTensor;
using internal::Describe;

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

struct BnGeometry {
  int64_t n, c, h, w;
};

absl::StatusOr<BnGeometry> CheckBn(const char* op, const Tensor& x) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "x", x, {DType::kFloat32}));
  if (x.dim() != 2 && x.dim() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x ", Describe(x), " must be [N, C] or [N, C, H, W]"));
  }
  RETURN_IF_ERROR(internal::CheckIntRange(op, x));
  const bool spatial = x.dim() == 4;
  return BnGeometry{x.shape()[0], x.shape()[1], spatial ? x.shape()[2] : 1,
                    spatial ? x.shape()[3] : 1};
}

absl::Status CheckChannelVector(const char* op, const char* name, const Tensor& t, const Tensor& x,
                                int64_t c) {
  RETURN_IF_ERROR(CheckCudaTensor(op, name, t, {DType::kFloat32}, 1));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, "x", x, name, t));
  if (t.shape()[0] != c) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must have one entry per channel, ", c));
  }
  return absl::OkStatus();
}

// x's descriptor (also y's, dy's and dx's) and the derived [1, C, 1, 1] parameter descriptor.
struct BnDescriptors {
  internal::TensorDescriptor x, param;

  absl::Status Init(const BnGeometry& g) {
    RETURN_IF_ERROR(internal::MakeNchw(&x, g.n, g.c, g.h, g.w).status());
    RETURN_IF_ERROR(param.Create());
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnDeriveBNTensorDescriptor(param.get(), x.get(), kMode));
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<BatchNormForwardResult> BatchNormForwardTrain(const Tensor& x, const Tensor& gamma,
                                                             const Tensor& beta,
                                                             Tensor* running_mean,
                                                             Tensor* running_var, double momentum,
                                                             double eps) {
  constexpr const char* kOp = "cuda::BatchNormForwardTrain";
  ASSIGN_OR_RETURN(const BnGeometry g, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "beta", beta, x, g.c));
  if (running_mean != nullptr) {
    RETURN_IF_ERROR(CheckChannelVector(kOp, "running_mean", *running_mean, x, g.c));
  }
  if (running_var != nullptr) {
    RETURN_IF_ERROR(CheckChannelVector(kOp, "running_var", *running_var, x, g.c));
  }
  const int64_t m = g.n * g.h * g.w;
  if (m < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": x ", Describe(x), " has ", m, " value(s) per channel; training needs at least 2"));
  }
  if (!(eps > 0.0) || !(momentum >= 0.0 && momentum <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": eps = ", eps, " must be > 0 and momentum = ", momentum, " in [0, 1]"));
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  BnDescriptors d;
  RETURN_IF_ERROR(d.Init(g));
  BatchNormForwardResult r;
  ASSIGN_OR_RETURN(r.y, internal::EmptyCuda(x.shape(), x.dtype(), x.device()));
  ASSIGN_OR_RETURN(r.save_mean, internal::EmptyCuda({g.c}, x.dtype(), x.device()));
  ASSIGN_OR_RETURN(r.save_invstd, internal::EmptyCuda({g.c}, x.dtype(), x.device()));
  // cuDNN takes both running statistics or neither; a missing one gets a scratch [C] that is
  // updated and dropped (its uninitialized contents only affect itself).
  Tensor scratch;
  void* mean_ptr = running_mean != nullptr ? running_mean->data() : nullptr;
  void* var_ptr = running_var != nullptr ? running_var->data() : nullptr;
  if ((mean_ptr == nullptr) != (var_ptr == nullptr)) {
    ASSIGN_OR_RETURN(scratch, internal::EmptyCuda({g.c}, x.dtype(), x.device()));
    if (mean_ptr == nullptr) {
      mean_ptr = scratch.data();
    } else {
      var_ptr = scratch.data();
    }
  }
  const float one = 1.0f, zero = 0.0f;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardTraining(
      handle, kMode, &one, &zero, d.x.get(), x.data(), d.x.get(), r.y.data(), d.param.get(),
      gamma.data(), beta.data(), momentum, mean_ptr, var_ptr, eps, r.save_mean.data(),
      r.save_invstd.data()));
  return r;
}

absl::StatusOr<Tensor> BatchNormForwardEval(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, const Tensor& running_mean,
                                            const Tensor& running_var, double eps) {
  constexpr const char* kOp = "cuda::BatchNormForwardEval";
  ASSIGN_OR_RETURN(const BnGeometry g, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "beta", beta, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "running_mean", running_mean, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "running_var", running_var, x, g.c));
  if (!(eps > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": eps = ", eps, " must be > 0"));
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  BnDescriptors d;
  RETURN_IF_ERROR(d.Init(g));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyCuda(x.shape(), x.dtype(), x.device()));
  const float one = 1.0f, zero = 0.0f;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationForwardInference(
      handle, kMode, &one, &zero, d.x.get(), x.data(), d.x.get(), y.data(), d.param.get(),
      gamma.data(), beta.data(), running_mean.data(), running_var.data(), eps));
  return y;
}

absl::StatusOr<BatchNormGrads> BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& save_mean, const Tensor& save_invstd,
                                                 const Tensor& dy) {
  constexpr const char* kOp = "cuda::BatchNormBackward";
  ASSIGN_OR_RETURN(const BnGeometry g, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "save_mean", save_mean, x, g.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "save_invstd", save_invstd, x, g.c));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "dy", dy, {DType::kFloat32}));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "dy", dy));
  RETURN_IF_ERROR(internal::CheckSameShape(kOp, "x", x, "dy", dy));
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  BnDescriptors d;
  RETURN_IF_ERROR(d.Init(g));
  BatchNormGrads grads;
  ASSIGN_OR_RETURN(grads.dx, internal::EmptyCuda(x.shape(), x.dtype(), x.device()));
  ASSIGN_OR_RETURN(grads.dgamma, internal::EmptyCuda({g.c}, x.dtype(), x.device()));
  ASSIGN_OR_RETURN(grads.dbeta, internal::EmptyCuda({g.c}, x.dtype(), x.device()));
  const float one = 1.0f, zero = 0.0f;
  // With the saved mean and inverse std given, cuDNN does not use epsilon; it only has to be a
  // value it accepts.
  constexpr double kUnusedEps = 1e-5;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnBatchNormalizationBackward(
      handle, kMode, &one, &zero, &one, &zero, d.x.get(), x.data(), d.x.get(), dy.data(), d.x.get(),
      grads.dx.data(), d.param.get(), gamma.data(), grads.dgamma.data(), grads.dbeta.data(),
      kUnusedEps, save_mean.data(), save_invstd.data()));
  return grads;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#pragma GCC diagnostic pop
