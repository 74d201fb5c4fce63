// Batch norm against a double reference (train, eval, running stats, backward) and finite
// differences, for [N, C], NCHW and channels-last inputs; errors.
#include "paddle/ops/cpu/batch_norm.h"

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

class BatchNormTest : public ::testing::TestWithParam<int> {};

TEST_P(BatchNormTest, MatchesReferenceAndFiniteDifferences) {
  const int kind = GetParam();  // 0: [N, C]; 1: NCHW; 2: channels-last
  const int64_t n = 4, c = 3, h = kind == 0 ? 1 : 3, w = kind == 0 ? 1 : 2;
  Tensor x = kind == 0 ? RandomTensor({n, c}, 1, -2, 3) : RandomTensor({n, c, h, w}, 1, -2, 3);
  if (kind == 2) {
    x = RandomTensor({n, h, w, c}, 1, -2, 3).Transpose(1, 3).value().Transpose(2, 3).value();
  }
  Tensor gamma = RandomTensor({c}, 2, 0.5, 1.5), beta = RandomTensor({c}, 3);
  Tensor rm = RandomTensor({c}, 4), rv = RandomTensor({c}, 5, 0.5, 1.5);
  const std::vector<double> rm0 = Values(rm), rv0 = Values(rv), xv = Values(x);
  const std::vector<double> g = Values(gamma), b = Values(beta);
  const double eps = 1e-5, momentum = 0.1;
  BatchNormForwardResult r = BatchNormForwardTrain(x, gamma, beta, &rm, &rv, momentum, eps).value();
  const int64_t hw = h * w, m = n * hw;
  std::vector<double> mean(c, 0), var(c, 0), y(xv.size());
  auto idx = [&](int64_t i, int64_t ch, int64_t p) { return (i * c + ch) * hw + p; };
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) mean[ch] += xv[idx(i, ch, p)] / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) var[ch] += std::pow(xv[idx(i, ch, p)] - mean[ch], 2) / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        y[idx(i, ch, p)] =
            (xv[idx(i, ch, p)] - mean[ch]) / std::sqrt(var[ch] + eps) * g[ch] + b[ch];
  }
  ExpectClose(r.y, y, 1e-5, 1e-5, "y");
  if (kind == 2) {
    EXPECT_EQ(r.y.strides(), x.strides());
  }
  ExpectClose(r.save_mean, mean, 1e-6, 1e-6, "save_mean");
  std::vector<double> rm1(c), rv1(c), invstd(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    invstd[ch] = 1 / std::sqrt(var[ch] + eps);
    rm1[ch] = 0.9 * rm0[ch] + 0.1 * mean[ch];
    rv1[ch] = 0.9 * rv0[ch] + 0.1 * var[ch] * m / (m - 1);
  }
  ExpectClose(r.save_invstd, invstd, 1e-5, 1e-5, "save_invstd");
  ExpectClose(rm, rm1, 1e-6, 1e-6, "running_mean");
  ExpectClose(rv, rv1, 1e-6, 1e-6, "running_var");
  // Eval with the updated running statistics.
  std::vector<double> ye(xv.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p)
        ye[idx(i, ch, p)] =
            (xv[idx(i, ch, p)] - rm1[ch]) / std::sqrt(rv1[ch] + eps) * g[ch] + b[ch];
  ExpectClose(BatchNormForwardEval(x, gamma, beta, rm, rv, eps).value(), ye, 1e-5, 1e-5, "eval");
  // Backward against the closed form and finite differences (smooth; eps 1e-2 in fp32).
  Tensor dy = RandomTensor(x.shape(), 6);
  const std::vector<double> dyv = Values(dy);
  BatchNormGrads gr = BatchNormBackward(x, gamma, r.save_mean, r.save_invstd, dy).value();
  std::vector<double> dbeta(c, 0), dgamma(c, 0), dx(xv.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        dbeta[ch] += dyv[idx(i, ch, p)];
        dgamma[ch] += dyv[idx(i, ch, p)] * (xv[idx(i, ch, p)] - mean[ch]) * invstd[ch];
      }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        const double xhat = (xv[idx(i, ch, p)] - mean[ch]) * invstd[ch];
        dx[idx(i, ch, p)] =
            g[ch] * invstd[ch] / m * (m * dyv[idx(i, ch, p)] - dbeta[ch] - xhat * dgamma[ch]);
      }
  ExpectClose(gr.dx, dx, 1e-5, 1e-4, "dx");
  ExpectClose(gr.dgamma, dgamma, 1e-5, 1e-5, "dgamma");
  ExpectClose(gr.dbeta, dbeta, 1e-5, 1e-5, "dbeta");
  auto loss = [&](const Tensor& t) {
    return Dot(BatchNormForwardTrain(t, gamma, beta, nullptr, nullptr, momentum, eps).value().y,
               dyv);
  };
  ExpectClose(gr.dx, NumericGrad(loss, x.Contiguous().value(), 1e-2), 5e-3, 2e-2, "dx fd");
}

INSTANTIATE_TEST_SUITE_P(Layouts, BatchNormTest, ::testing::Values(0, 1, 2));

TEST(BatchNormErrorTest, BadArgumentsAreInvalidArgument) {
  Tensor x = RandomTensor({4, 3}, 1), g = RandomTensor({3}, 2), b = RandomTensor({3}, 3);
  Tensor rm = RandomTensor({3}, 4), rv = RandomTensor({3}, 5, 0.5, 1);
  auto code = [](const absl::Status& s) { return s.code(); };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(
      code(BatchNormForwardTrain(RandomTensor({4, 3, 2}, 1), g, b, &rm, &rv, 0.1, 1e-5).status()),
      kBad);
  absl::Status s = BatchNormForwardTrain(x, RandomTensor({4}, 1), b, &rm, &rv, 0.1, 1e-5).status();
  EXPECT_EQ(code(s), kBad);
  EXPECT_NE(s.message().find("[4]"), std::string::npos) << s;
  Tensor bad_rm = RandomTensor({2}, 1);
  EXPECT_EQ(code(BatchNormForwardTrain(x, g, b, &bad_rm, &rv, 0.1, 1e-5).status()), kBad);
  EXPECT_EQ(
      code(BatchNormForwardTrain(RandomTensor({1, 3}, 1), g, b, &rm, &rv, 0.1, 1e-5).status()),
      kBad);
  EXPECT_EQ(code(BatchNormForwardTrain(x, g, b, &rm, &rv, 1.5, 1e-5).status()), kBad);
  EXPECT_EQ(code(BatchNormForwardTrain(x, g, b, &rm, &rv, 0.1, 0).status()), kBad);
  EXPECT_EQ(code(BatchNormForwardEval(x, g, b, rm, RandomTensor({5}, 1), 1e-5).status()), kBad);
  EXPECT_EQ(code(BatchNormForwardEval(x, g, b, rm, rv, -1).status()), kBad);
  EXPECT_EQ(code(BatchNormBackward(x, g, rm, rv, RandomTensor({3, 4}, 1)).status()), kBad);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
