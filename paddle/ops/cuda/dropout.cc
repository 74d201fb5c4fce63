// Dropout on CUDA tensors: argument checks, then the kernels of dropout.cu.
#include "paddle/ops/cuda/dropout.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/dropout_kernels.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

absl::Status CheckP(const char* op, double p) {
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": p = ", p, " must be in [0, 1)"));
  }
  return absl::OkStatus();
}

// The CPU op's scale, computed the same way so y and dx match it bit for bit.
float Scale(double p) { return static_cast<float>(1.0 / (1.0 - p)); }

}  // namespace

absl::StatusOr<DropoutResult> DropoutForward(const Tensor& x, double p, uint64_t seed,
                                             uint64_t stream, uint64_t offset) {
  constexpr const char* kOp = "cuda::DropoutForward";
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "x", x, {DType::kFloat32}));
  RETURN_IF_ERROR(CheckP(kOp, p));
  RETURN_IF_ERROR(UseDevice(x.device()));
  DropoutResult r;
  ASSIGN_OR_RETURN(r.y, internal::EmptyCuda(x.shape(), DType::kFloat32, x.device()));
  ASSIGN_OR_RETURN(r.mask, internal::EmptyCuda(x.shape(), DType::kUInt8, x.device()));
  // p < 1, so the floor fits in 32 bits (the CPU op's threshold).
  const auto threshold = static_cast<uint32_t>(std::floor(p * 4294967296.0));
  RETURN_IF_ERROR(kernels::DropoutForward(x.data<float>(), r.y.data<float>(),
                                          r.mask.data<uint8_t>(), x.numel(), threshold, Scale(p),
                                          seed, stream, offset, CurrentStream()));
  return r;
}

absl::StatusOr<Tensor> DropoutBackward(const Tensor& mask, const Tensor& dy, double p) {
  constexpr const char* kOp = "cuda::DropoutBackward";
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "mask", mask, {DType::kUInt8}));
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "dy", dy, {DType::kFloat32}));
  RETURN_IF_ERROR(internal::CheckSameShape(kOp, "mask", mask, "dy", dy));
  if (mask.device() != dy.device()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": mask ", internal::Describe(mask),
                                                   " and dy ", internal::Describe(dy),
                                                   " must be on the same device"));
  }
  RETURN_IF_ERROR(CheckP(kOp, p));
  RETURN_IF_ERROR(UseDevice(dy.device()));
  ASSIGN_OR_RETURN(Tensor dx, internal::EmptyCuda(dy.shape(), DType::kFloat32, dy.device()));
  RETURN_IF_ERROR(kernels::DropoutBackward(mask.data<uint8_t>(), dy.data<float>(), dx.data<float>(),
                                           dy.numel(), Scale(p), CurrentStream()));
  return dx;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
