// Tensor-level activations: argument checks, output allocation, one kernel launch each.
#include "paddle/ops/cuda/activation.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/kernels.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

using internal::CheckCudaTensor;
using kernels::Activation;

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16,
                                                      DType::kBFloat16};

absl::StatusOr<Tensor> Forward(const char* op, Activation act, const Tensor& x) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "x", x, kFloatTypes));
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyCuda(x.shape(), x.dtype(), x.device()));
  RETURN_IF_ERROR(
      kernels::ActivationForward(act, x.dtype(), x.data(), y.data(), x.numel(), CurrentStream()));
  return y;
}

absl::StatusOr<Tensor> Backward(const char* op, Activation act, const char* saved_name,
                                const Tensor& saved, const Tensor& dy) {
  RETURN_IF_ERROR(CheckCudaTensor(op, saved_name, saved, kFloatTypes));
  RETURN_IF_ERROR(CheckCudaTensor(op, "dy", dy, kFloatTypes));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, saved_name, saved, "dy", dy));
  RETURN_IF_ERROR(internal::CheckSameShape(op, saved_name, saved, "dy", dy));
  RETURN_IF_ERROR(UseDevice(dy.device()));
  ASSIGN_OR_RETURN(Tensor dx, internal::EmptyCuda(dy.shape(), dy.dtype(), dy.device()));
  RETURN_IF_ERROR(kernels::ActivationBackward(act, dy.dtype(), saved.data(), dy.data(), dx.data(),
                                              dy.numel(), CurrentStream()));
  return dx;
}

}  // namespace

absl::StatusOr<Tensor> ReluForward(const Tensor& x) {
  return Forward("cuda::ReluForward", Activation::kRelu, x);
}
absl::StatusOr<Tensor> ReluBackward(const Tensor& y, const Tensor& dy) {
  return Backward("cuda::ReluBackward", Activation::kRelu, "y", y, dy);
}
absl::StatusOr<Tensor> GeluForward(const Tensor& x) {
  return Forward("cuda::GeluForward", Activation::kGelu, x);
}
absl::StatusOr<Tensor> GeluBackward(const Tensor& x, const Tensor& dy) {
  return Backward("cuda::GeluBackward", Activation::kGelu, "x", x, dy);
}
absl::StatusOr<Tensor> TanhForward(const Tensor& x) {
  return Forward("cuda::TanhForward", Activation::kTanh, x);
}
absl::StatusOr<Tensor> TanhBackward(const Tensor& y, const Tensor& dy) {
  return Backward("cuda::TanhBackward", Activation::kTanh, "y", y, dy);
}
absl::StatusOr<Tensor> SigmoidForward(const Tensor& x) {
  return Forward("cuda::SigmoidForward", Activation::kSigmoid, x);
}
absl::StatusOr<Tensor> SigmoidBackward(const Tensor& y, const Tensor& dy) {
  return Backward("cuda::SigmoidBackward", Activation::kSigmoid, "y", y, dy);
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
