// Gemm and Linear against naive double loops and finite differences, plus error paths.
#include "paddle/ops/cpu/linear.h"

#include "gtest/gtest.h"
#include "paddle/ops/cpu/gemm.h"
#include "paddle/ops/cpu/threading.h"
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

TEST(GemmTest, AllTransposeCombinationsMatchReference) {
  const int64_t m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? RandomTensor({k, m}, 1) : RandomTensor({m, k}, 1);
      Tensor b = tb ? RandomTensor({n, k}, 2) : RandomTensor({k, n}, 2);
      Tensor c = RandomTensor({m, n}, 3);
      std::vector<double> av = Values(a), bv = Values(b), want = Values(c);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t l = 0; l < k; ++l)
            acc += (ta ? av[l * m + i] : av[i * k + l]) * (tb ? bv[j * k + l] : bv[l * n + j]);
          want[i * n + j] = 2.0 * acc + 0.5 * want[i * n + j];
        }
      ASSERT_TRUE(Gemm(ta, tb, 2.0f, a, b, 0.5f, &c).ok());
      ExpectClose(c, want, 1e-5, 1e-5, "c");
    }
  }
}

TEST(GemmTest, TransposedViewsAreUsedWithoutCopy) {
  Tensor a = RandomTensor({4, 6}, 1);
  Tensor b = RandomTensor({6, 5}, 2);
  Tensor c1 = Tensor::Empty({4, 5}, DType::kFloat32).value();
  Tensor c2 = Tensor::Empty({4, 5}, DType::kFloat32).value();
  ASSERT_TRUE(Gemm(false, false, 1, a, b, 0, &c1).ok());
  // a^T^T with a transposed view.
  Tensor at = a.Clone().value().Transpose(0, 1).value().Clone().value().Transpose(0, 1).value();
  ASSERT_FALSE(at.is_contiguous());
  ASSERT_TRUE(Gemm(false, false, 1, at, b, 0, &c2).ok());
  EXPECT_EQ(Values(c1), Values(c2));
}

TEST(GemmTest, Errors) {
  Tensor a = RandomTensor({4, 6}, 1);
  Tensor b = RandomTensor({5, 5}, 2);
  Tensor c = Tensor::Empty({4, 5}, DType::kFloat32).value();
  absl::Status s = Gemm(false, false, 1, a, b, 0, &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 6]"), std::string::npos) << s;
  EXPECT_EQ(Gemm(false, false, 1, a, b, 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(false, false, 1, RandomTensor({4}, 1), b, 0, &c).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor strided = RandomTensor({4, 6, 2}, 1).Select(2, 0).value();
  EXPECT_EQ(Gemm(false, false, 1, strided, RandomTensor({6, 5}, 2), 0, &c).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor ct = Tensor::Empty({5, 4}, DType::kFloat32).value().Transpose(0, 1).value();
  EXPECT_EQ(Gemm(false, false, 1, a, RandomTensor({6, 5}, 2), 0, &ct).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LinearTest, ForwardAndBackwardMatchReferenceAndFiniteDifferences) {
  const int64_t n = 3, in = 5, out = 4;
  Tensor x = RandomTensor({n, in}, 1);
  Tensor w = RandomTensor({out, in}, 2);
  Tensor b = RandomTensor({out}, 3);
  std::vector<double> xv = Values(x), wv = Values(w), bv = Values(b);
  std::vector<double> y(n * out);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      y[i * out + j] = bv[j];
      for (int64_t l = 0; l < in; ++l) y[i * out + j] += xv[i * in + l] * wv[j * in + l];
    }
  ExpectClose(LinearForward(x, w, &b).value(), y, 1e-5, 1e-5, "y");
  Tensor dy = RandomTensor({n, out}, 4);
  std::vector<double> dyv = Values(dy);
  LinearGrads g = LinearBackward(x, w, dy, true, true).value();
  std::vector<double> dx(n * in, 0), dw(out * in, 0), db(out, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      db[j] += dyv[i * out + j];
      for (int64_t l = 0; l < in; ++l) {
        dx[i * in + l] += dyv[i * out + j] * wv[j * in + l];
        dw[j * in + l] += dyv[i * out + j] * xv[i * in + l];
      }
    }
  ExpectClose(g.dx, dx, 1e-5, 1e-5, "dx");
  ExpectClose(g.dw, dw, 1e-5, 1e-5, "dw");
  ExpectClose(g.db, db, 1e-5, 1e-5, "db");
  // Linear in each argument: fp32 rounding only, 1e-2 absolute with eps 1e-2.
  auto lx = [&](const Tensor& t) { return Dot(LinearForward(t, w, &b).value(), dyv); };
  auto lw = [&](const Tensor& t) { return Dot(LinearForward(x, t, &b).value(), dyv); };
  auto lb = [&](const Tensor& t) { return Dot(LinearForward(x, w, &t).value(), dyv); };
  ExpectClose(g.dx, NumericGrad(lx, x, 1e-2), 1e-2, 1e-2, "dx fd");
  ExpectClose(g.dw, NumericGrad(lw, w, 1e-2), 1e-2, 1e-2, "dw fd");
  ExpectClose(g.db, NumericGrad(lb, b, 1e-2), 1e-2, 1e-2, "db fd");
  LinearGrads only_w = LinearBackward(x, w, dy, false, false).value();
  EXPECT_FALSE(only_w.dx.defined());
  EXPECT_FALSE(only_w.db.defined());
  std::vector<double> y_nobias = y;
  for (int64_t i = 0; i < n * out; ++i) y_nobias[i] -= bv[i % out];
  ExpectClose(LinearForward(x, w, nullptr).value(), y_nobias, 1e-5, 1e-5, "y without bias");
}

TEST(LinearTest, DeterministicForAThreadCount) {
  for (int threads : {1, 2}) {
    SetNumThreads(threads);
    EXPECT_EQ(NumThreads(), threads);
    Tensor x = RandomTensor({64, 300}, 1);
    Tensor w = RandomTensor({70, 300}, 2);
    Tensor dy = RandomTensor({64, 70}, 3);
    LinearGrads a = LinearBackward(x, w, dy, true, true).value();
    LinearGrads b = LinearBackward(x, w, dy, true, true).value();
    EXPECT_EQ(Values(a.dw), Values(b.dw));
    EXPECT_EQ(Values(a.dx), Values(b.dx));
  }
  SetNumThreads(1);
}

TEST(LinearTest, Errors) {
  Tensor x = RandomTensor({3, 5}, 1);
  Tensor w = RandomTensor({4, 5}, 2);
  Tensor bad_b = RandomTensor({5}, 3);
  absl::Status s = LinearForward(x, RandomTensor({4, 6}, 2), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 6]"), std::string::npos) << s;
  EXPECT_EQ(LinearForward(x, w, &bad_b).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LinearForward(RandomTensor({3}, 1), w, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LinearBackward(x, w, RandomTensor({3, 5}, 1), true, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LinearBackward(x, w, RandomTensor({3}, 1), true, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
