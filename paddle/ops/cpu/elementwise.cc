// Elementwise arithmetic: OpenMP loops over the raw storage of dense tensors.
#include "paddle/ops/cpu/elementwise.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using internal::CheckTensor;
using internal::Describe;

template <typename F>
absl::StatusOr<Tensor> Binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  return internal::MapBinary(op, "a", a, "b", b, f);
}

}  // namespace

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b) {
  return Binary("Add", a, b, [](float x, float y) { return x + y; });
}

absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return Binary("Mul", a, b, [](float x, float y) { return x * y; });
}

absl::StatusOr<Tensor> Scale(const Tensor& a, float s) {
  RETURN_IF_ERROR(CheckTensor("Scale", "a", a, DType::kFloat32));
  ASSIGN_OR_RETURN(Tensor ad, internal::Dense(a));
  ASSIGN_OR_RETURN(Tensor out, internal::EmptyLike(ad, DType::kFloat32));
  const float* ap = ad.data<float>();
  float* op = out.data<float>();
  const int64_t n = ad.numel();
#pragma omp parallel for simd schedule(static) if (n > internal::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] * s;
  return out;
}

absl::Status AddInPlace(Tensor* dst, const Tensor& src, float alpha) {
  constexpr const char* kOp = "AddInPlace";
  if (dst == nullptr) return absl::InvalidArgumentError("AddInPlace: dst is null");
  RETURN_IF_ERROR(CheckTensor(kOp, "dst", *dst, DType::kFloat32));
  RETURN_IF_ERROR(CheckTensor(kOp, "src", src, DType::kFloat32));
  if (!internal::IsDense(*dst)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": dst ", Describe(*dst), " with strides ",
                                                   ShapeToString(dst->strides()), " is not dense"));
  }
  Tensor s;
  if (dst->shape() == src.shape()) {
    ASSIGN_OR_RETURN(s, internal::MatchLayout(src, *dst));
  } else if (dst->numel() == src.numel() && dst->is_contiguous()) {
    ASSIGN_OR_RETURN(s, src.Contiguous());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": dst ", Describe(*dst), " and src ", Describe(src),
        " must have the same shape, or the same number of elements with dst contiguous"));
  }
  float* dp = dst->data<float>();
  const float* sp = s.data<float>();
  const int64_t n = dst->numel();
#pragma omp parallel for simd schedule(static) if (n > internal::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dp[i] += alpha * sp[i];
  return absl::OkStatus();
}

absl::Status Fill(Tensor* dst, float value) {
  if (dst == nullptr) return absl::InvalidArgumentError("Fill: dst is null");
  RETURN_IF_ERROR(CheckTensor("Fill", "dst", *dst, DType::kFloat32));
  if (!internal::IsDense(*dst)) {
    ASSIGN_OR_RETURN(Tensor tmp, Tensor::Empty(dst->shape(), DType::kFloat32));
    RETURN_IF_ERROR(Fill(&tmp, value));
    return dst->CopyFrom(tmp);
  }
  float* dp = dst->data<float>();
  const int64_t n = dst->numel();
#pragma omp parallel for simd schedule(static) if (n > internal::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dp[i] = value;
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
