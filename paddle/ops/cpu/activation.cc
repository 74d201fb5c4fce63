// Activations: OpenMP loops over the raw storage of dense tensors.
#include "paddle/ops/cpu/activation.h"

#include <cmath>

#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using internal::CheckTensor;

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

template <typename F>
absl::StatusOr<Tensor> Unary(const char* op, const Tensor& x, F f) {
  RETURN_IF_ERROR(CheckTensor(op, "x", x, DType::kFloat32));
  ASSIGN_OR_RETURN(Tensor xd, internal::Dense(x));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyLike(xd, DType::kFloat32));
  const float* xp = xd.data<float>();
  float* yp = y.data<float>();
  const int64_t n = xd.numel();
#pragma omp parallel for simd schedule(static) if (n > internal::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) yp[i] = f(xp[i]);
  return y;
}

// dx = f(a, dy), dx in a's layout.
template <typename F>
absl::StatusOr<Tensor> Backward(const char* op, const char* a_name, const Tensor& a,
                                const Tensor& dy, F f) {
  return internal::MapBinary(op, a_name, a, "dy", dy, f);
}

}  // namespace

absl::StatusOr<Tensor> ReluForward(const Tensor& x) {
  return Unary("ReluForward", x, [](float v) { return v > 0.0f ? v : 0.0f; });
}

absl::StatusOr<Tensor> ReluBackward(const Tensor& y, const Tensor& dy) {
  return Backward("ReluBackward", "y", y, dy, [](float v, float g) { return v > 0.0f ? g : 0.0f; });
}

absl::StatusOr<Tensor> GeluForward(const Tensor& x) {
  return Unary("GeluForward", x,
               [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
}

absl::StatusOr<Tensor> GeluBackward(const Tensor& x, const Tensor& dy) {
  return Backward("GeluBackward", "x", x, dy, [](float v, float g) {
    const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    return g * (cdf + v * pdf);
  });
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
