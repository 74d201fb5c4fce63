// Helpers for the CPU kernel tests: reproducible random tensors (Philox), element access in
// logical order whatever the strides, and central finite differences.
#ifndef TESTS_OPS_CPU_OPS_TESTING_H_
#define TESTS_OPS_CPU_OPS_TESTING_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace testing {

// Uniform in [lo, hi), contiguous fp32, drawn from Philox(seed, 0).
inline Tensor RandomTensor(absl::Span<const int64_t> shape, uint64_t seed, float lo = -1.0f,
                           float hi = 1.0f) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng.NextFloat();
  return t;
}

// Elements in logical (row-major) order, as double, whatever the strides.
inline std::vector<double> Values(const Tensor& t) {
  Tensor c = t.Contiguous().value();
  std::vector<double> v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = c.data<float>()[i];
  return v;
}

inline Tensor FromValues(absl::Span<const int64_t> shape, const std::vector<double>& v) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

// |got - want| <= atol + rtol |want| elementwise.
inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                        double atol, double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > atol + rtol * std::fabs(want[i]) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
}

inline void ExpectClose(const Tensor& got, const std::vector<double>& want, double atol,
                        double rtol, const char* what) {
  ExpectClose(Values(got), want, atol, rtol, what);
}

// d loss / d x by central differences, loss(x) evaluated on perturbed copies of x (contiguous).
inline std::vector<double> NumericGrad(const std::function<double(const Tensor&)>& loss,
                                       const Tensor& x, double eps) {
  Tensor xc = x.Clone().value();
  std::vector<double> g(xc.numel());
  float* p = xc.data<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) {
    const float orig = p[i];
    p[i] = orig + static_cast<float>(eps);
    const double up = loss(xc);
    p[i] = orig - static_cast<float>(eps);
    const double down = loss(xc);
    p[i] = orig;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

// sum_i y[i] * r[i] in double, the scalar whose gradient with respect to y is r.
inline double Dot(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> v = Values(y);
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

}  // namespace testing
}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // TESTS_OPS_CPU_OPS_TESTING_H_
