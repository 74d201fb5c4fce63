// Helpers shared by the optimizer tests: parameters and gradients made from (seed, index) with
// Philox, reading values back as doubles, and element-wise comparison with a tolerance.
#ifndef TESTS_OPTIM_OPTIM_TESTING_H_
#define TESTS_OPTIM_OPTIM_TESTING_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"

namespace paddle::optim {

inline int64_t NumelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline Tensor MakeTensor(const Shape& shape, const std::vector<double>& values,
                         DType dtype = DType::kFloat32) {
  Tensor t = *Tensor::Empty(shape, dtype);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kFloat32) {
      t.data<float>()[i] = static_cast<float>(values[i]);
    } else {
      t.data<double>()[i] = values[i];
    }
  }
  return t;
}

// Values as doubles (any float dtype, contiguous).
inline std::vector<double> Values(const Tensor& t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    out[i] = t.dtype() == DType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
  }
  return out;
}

// Roughly N(0, scale^2), from (seed, stream), rounded to `dtype` so a reference in double starts
// from exactly the values the optimizer sees.
inline std::vector<double> Random(uint64_t seed, uint64_t stream, int64_t n, double scale,
                                  DType dtype = DType::kFloat32) {
  Philox rng(seed, stream);
  std::vector<double> v(n);
  for (double& x : v) {
    x = scale * rng.NextNormal();
    if (dtype == DType::kFloat32) x = static_cast<float>(x);
  }
  return v;
}

inline autograd::Variable MakeParam(const std::string& name, const Shape& shape,
                                    const std::vector<double>& values,
                                    DType dtype = DType::kFloat32) {
  return autograd::Variable(MakeTensor(shape, values, dtype), /*requires_grad=*/true, name);
}

inline void SetGrad(autograd::Variable& v, const std::vector<double>& values) {
  ASSERT_TRUE(v.set_grad(MakeTensor(v.shape(), values, v.data().dtype())).ok());
}

// |a - b| <= atol + rtol * |b| for every element.
inline void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                       double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_LE(std::abs(actual[i] - expected[i]), atol + rtol * std::abs(expected[i]))
        << what << " element " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

}  // namespace paddle::optim

#endif  // TESTS_OPTIM_OPTIM_TESTING_H_
