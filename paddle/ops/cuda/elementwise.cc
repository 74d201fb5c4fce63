// Tensor-level elementwise ops: argument checks, output allocation, one kernel launch each.
#include "paddle/ops/cuda/elementwise.h"

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
using internal::CheckSameDeviceAndDType;
using internal::CheckSameShape;
using internal::EmptyCuda;

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16,
                                                      DType::kBFloat16};

absl::StatusOr<Tensor> BinaryOp(const char* op, kernels::BinaryOp kind, const Tensor& a,
                                const Tensor& b) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "a", a, kFloatTypes));
  RETURN_IF_ERROR(CheckCudaTensor(op, "b", b, kFloatTypes));
  RETURN_IF_ERROR(CheckSameDeviceAndDType(op, "a", a, "b", b));
  RETURN_IF_ERROR(CheckSameShape(op, "a", a, "b", b));
  RETURN_IF_ERROR(UseDevice(a.device()));
  ASSIGN_OR_RETURN(Tensor out, EmptyCuda(a.shape(), a.dtype(), a.device()));
  RETURN_IF_ERROR(
      kernels::Binary(kind, a.dtype(), a.data(), b.data(), out.data(), a.numel(), CurrentStream()));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b) {
  return BinaryOp("cuda::Add", kernels::BinaryOp::kAdd, a, b);
}

absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b) {
  return BinaryOp("cuda::Sub", kernels::BinaryOp::kSub, a, b);
}

absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return BinaryOp("cuda::Mul", kernels::BinaryOp::kMul, a, b);
}

absl::StatusOr<Tensor> Scale(const Tensor& a, float s) {
  constexpr const char* kOp = "cuda::Scale";
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "a", a, kFloatTypes));
  RETURN_IF_ERROR(UseDevice(a.device()));
  ASSIGN_OR_RETURN(Tensor out, EmptyCuda(a.shape(), a.dtype(), a.device()));
  RETURN_IF_ERROR(kernels::Scale(a.dtype(), a.data(), s, out.data(), a.numel(), CurrentStream()));
  return out;
}

absl::Status AddInPlace(Tensor* dst, const Tensor& src, float alpha) {
  constexpr const char* kOp = "cuda::AddInPlace";
  if (dst == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": dst is null"));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "dst", *dst, kFloatTypes));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "src", src, kFloatTypes));
  RETURN_IF_ERROR(CheckSameDeviceAndDType(kOp, "dst", *dst, "src", src));
  if (dst->numel() != src.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": dst ", internal::Describe(*dst), " and src ", internal::Describe(src),
                     " must have the same shape or at least the same number of elements"));
  }
  RETURN_IF_ERROR(UseDevice(dst->device()));
  return kernels::Axpy(dst->dtype(), alpha, src.data(), dst->data(), dst->numel(), CurrentStream());
}

absl::Status Fill(Tensor* dst, float value) {
  constexpr const char* kOp = "cuda::Fill";
  if (dst == nullptr) return absl::InvalidArgumentError(absl::StrCat(kOp, ": dst is null"));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "dst", *dst, kFloatTypes));
  RETURN_IF_ERROR(UseDevice(dst->device()));
  return kernels::Fill(dst->dtype(), dst->data(), value, dst->numel(), CurrentStream());
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
