// ReLU and GELU against closed forms in double and finite differences; layouts; errors.
#include "paddle/ops/cpu/activation.h"

#include <cmath>

#include "gtest/gtest.h"
#include "tests/ops/cpu/ops_testing.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using testing::Dot;
using testing::ExpectClose;
using testing::NumericGrad;
using testing::RandomTensor;
using testing::Values;

TEST(ActivationTest, ReluAndGeluMatchReferenceAndFiniteDifferences) {
  Tensor x = RandomTensor({3, 5, 7}, 1, -3, 3);
  // Keep ReLU's inputs away from the kink so that finite differences are exact.
  for (int64_t i = 0; i < x.numel(); ++i) {
    float& v = x.data<float>()[i];
    if (std::fabs(v) < 0.05f) v = 0.5f;
  }
  Tensor dy = RandomTensor({3, 5, 7}, 2);
  const std::vector<double> xv = Values(x), dyv = Values(dy);
  std::vector<double> relu(xv.size()), drelu(xv.size()), gelu(xv.size()), dgelu(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    relu[i] = xv[i] > 0 ? xv[i] : 0;
    drelu[i] = xv[i] > 0 ? dyv[i] : 0;
    const double cdf = 0.5 * (1 + std::erf(xv[i] / std::sqrt(2.0)));
    gelu[i] = xv[i] * cdf;
    dgelu[i] = dyv[i] * (cdf + xv[i] * std::exp(-0.5 * xv[i] * xv[i]) / std::sqrt(2 * M_PI));
  }
  Tensor y = ReluForward(x).value();
  ExpectClose(y, relu, 0, 0, "relu");
  Tensor dx = ReluBackward(y, dy).value();
  ExpectClose(dx, drelu, 0, 0, "relu dx");
  ExpectClose(GeluForward(x).value(), gelu, 1e-6, 1e-5, "gelu");
  Tensor gdx = GeluBackward(x, dy).value();
  ExpectClose(gdx, dgelu, 1e-6, 1e-5, "gelu dx");
  // Smooth functions of one variable: central differences with eps 1e-2 have O(eps^2) error.
  auto lr = [&](const Tensor& t) { return Dot(ReluForward(t).value(), dyv); };
  auto lg = [&](const Tensor& t) { return Dot(GeluForward(t).value(), dyv); };
  ExpectClose(dx, NumericGrad(lr, x, 1e-2), 2e-3, 1e-2, "relu fd");
  ExpectClose(gdx, NumericGrad(lg, x, 1e-2), 2e-3, 1e-2, "gelu fd");
}

TEST(ActivationTest, KeepsChannelsLastLayout) {
  Tensor nhwc = RandomTensor({2, 4, 5, 3}, 1);
  Tensor x = nhwc.Transpose(1, 3).value().Transpose(2, 3).value();  // [2, 3, 4, 5] channels-last
  Tensor y = ReluForward(x).value();
  EXPECT_EQ(y.strides(), x.strides());
  EXPECT_EQ(Values(y), Values(ReluForward(x.Contiguous().value()).value()));
  // dy in NCHW while y is channels-last: converted, same values.
  Tensor dy = RandomTensor({2, 3, 4, 5}, 2);
  EXPECT_EQ(Values(ReluBackward(y, dy).value()),
            Values(ReluBackward(y.Contiguous().value(), dy).value()));
}

TEST(ActivationTest, Errors) {
  Tensor x = RandomTensor({3, 4}, 1);
  EXPECT_EQ(ReluForward(Tensor()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GeluForward(Tensor::Zeros({3}, DType::kInt64).value()).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = ReluBackward(x, RandomTensor({4, 3}, 1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 3]"), std::string::npos) << s;
  EXPECT_EQ(GeluBackward(x, RandomTensor({12}, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
