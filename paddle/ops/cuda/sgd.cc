// Tensor-level SGD update; see sgd.h.
#include "paddle/ops/cuda/sgd.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {

absl::Status SgdUpdate(Tensor* w, const Tensor& g, Tensor* momentum_buf,
                       const kernels::SgdParams& p) {
  constexpr const char* kOp = "cuda::SgdUpdate";
  if (!(p.momentum >= 0.0f) || !(p.weight_decay >= 0.0f) ||
      !(p.dampening >= 0.0f && p.dampening <= 1.0f) || !(p.lr >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": need lr >= 0, momentum >= 0, weight_decay >= 0 and 0 <= dampening <= 1; got lr ",
        p.lr, ", momentum ", p.momentum, ", weight_decay ", p.weight_decay, ", dampening ",
        p.dampening));
  }
  if (p.nesterov && (p.momentum <= 0.0f || p.dampening != 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": Nesterov momentum needs momentum > 0 and dampening 0; got momentum ",
                     p.momentum, ", dampening ", p.dampening));
  }
  if (w == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": w is null"));
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "w", *w, {DType::kFloat32}));
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "g", g, {DType::kFloat32}));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "w", *w, "g", g));
  RETURN_IF_ERROR(internal::CheckSameShape(kOp, "w", *w, "g", g));
  float* buf = nullptr;
  if (p.momentum != 0.0f) {
    if (momentum_buf == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": momentum ", p.momentum,
                                                     " needs a momentum buffer shaped like w ",
                                                     internal::Describe(*w), "; got null"));
    }
    RETURN_IF_ERROR(
        internal::CheckCudaTensor(kOp, "momentum_buf", *momentum_buf, {DType::kFloat32}));
    RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "w", *w, "momentum_buf", *momentum_buf));
    RETURN_IF_ERROR(internal::CheckSameShape(kOp, "w", *w, "momentum_buf", *momentum_buf));
    buf = momentum_buf->data<float>();
  }
  RETURN_IF_ERROR(UseDevice(w->device()));
  return kernels::SgdUpdate(p, w->data<float>(), g.data<float>(), buf, w->numel(), CurrentStream());
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
