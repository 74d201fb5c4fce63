// Conv2d against a naive double-precision loop and central finite differences, over strides,
// padding, odd sizes and layouts; plus the error paths.
#include "paddle/ops/cpu/conv2d.h"

#include <tuple>

#include "gtest/gtest.h"
#include "tests/ops/cpu/ops_testing.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using testing::Dot;
using testing::ExpectClose;
using testing::FromValues;
using testing::NumericGrad;
using testing::RandomTensor;
using testing::Values;

struct Case {
  int64_t n, c, h, w, k, r, s;
  Conv2dOptions o;
};

int64_t Out(int64_t size, int64_t pad, int64_t kernel, int64_t stride) {
  return (size + 2 * pad - kernel) / stride + 1;
}

// Naive forward, double accumulation.
std::vector<double> RefForward(const Case& c, const std::vector<double>& x,
                               const std::vector<double>& w, const std::vector<double>* b) {
  const int64_t oh = Out(c.h, c.o.pad_h, c.r, c.o.stride_h);
  const int64_t ow = Out(c.w, c.o.pad_w, c.s, c.o.stride_w);
  std::vector<double> y(c.n * c.k * oh * ow);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t k = 0; k < c.k; ++k)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b ? (*b)[k] : 0.0;
          for (int64_t ch = 0; ch < c.c; ++ch)
            for (int64_t r = 0; r < c.r; ++r)
              for (int64_t s = 0; s < c.s; ++s) {
                const int64_t hi = i * c.o.stride_h - c.o.pad_h + r;
                const int64_t wi = j * c.o.stride_w - c.o.pad_w + s;
                if (hi < 0 || hi >= c.h || wi < 0 || wi >= c.w) continue;
                acc += x[((n * c.c + ch) * c.h + hi) * c.w + wi] *
                       w[((k * c.c + ch) * c.r + r) * c.s + s];
              }
          y[((n * c.k + k) * oh + i) * ow + j] = acc;
        }
  return y;
}

// Naive backward: dx, dw, db from dy.
void RefBackward(const Case& c, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& dy, std::vector<double>* dx, std::vector<double>* dw,
                 std::vector<double>* db) {
  const int64_t oh = Out(c.h, c.o.pad_h, c.r, c.o.stride_h);
  const int64_t ow = Out(c.w, c.o.pad_w, c.s, c.o.stride_w);
  dx->assign(x.size(), 0.0);
  dw->assign(w.size(), 0.0);
  db->assign(c.k, 0.0);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t k = 0; k < c.k; ++k)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const double g = dy[((n * c.k + k) * oh + i) * ow + j];
          (*db)[k] += g;
          for (int64_t ch = 0; ch < c.c; ++ch)
            for (int64_t r = 0; r < c.r; ++r)
              for (int64_t s = 0; s < c.s; ++s) {
                const int64_t hi = i * c.o.stride_h - c.o.pad_h + r;
                const int64_t wi = j * c.o.stride_w - c.o.pad_w + s;
                if (hi < 0 || hi >= c.h || wi < 0 || wi >= c.w) continue;
                const int64_t xi = ((n * c.c + ch) * c.h + hi) * c.w + wi;
                const int64_t wj = ((k * c.c + ch) * c.r + r) * c.s + s;
                (*dx)[xi] += g * w[wj];
                (*dw)[wj] += g * x[xi];
              }
        }
}

class Conv2dTest : public ::testing::TestWithParam<Case> {};

TEST_P(Conv2dTest, ForwardMatchesReference) {
  const Case c = GetParam();
  Tensor x = RandomTensor({c.n, c.c, c.h, c.w}, 1);
  Tensor w = RandomTensor({c.k, c.c, c.r, c.s}, 2);
  Tensor b = RandomTensor({c.k}, 3);
  const std::vector<double> xv = Values(x), wv = Values(w), bv = Values(b);
  Tensor y = Conv2dForward(x, w, &b, c.o).value();
  ASSERT_EQ(y.shape(), (Shape{c.n, c.k, Out(c.h, c.o.pad_h, c.r, c.o.stride_h),
                              Out(c.w, c.o.pad_w, c.s, c.o.stride_w)}));
  ExpectClose(y, RefForward(c, xv, wv, &bv), 1e-4, 1e-4, "y");
  Tensor y_nobias = Conv2dForward(x, w, nullptr, c.o).value();
  ExpectClose(y_nobias, RefForward(c, xv, wv, nullptr), 1e-4, 1e-4, "y without bias");
}

TEST_P(Conv2dTest, BackwardMatchesReferenceAndFiniteDifferences) {
  const Case c = GetParam();
  Tensor x = RandomTensor({c.n, c.c, c.h, c.w}, 4);
  Tensor w = RandomTensor({c.k, c.c, c.r, c.s}, 5);
  Tensor y = Conv2dForward(x, w, nullptr, c.o).value();
  Tensor dy = RandomTensor(y.shape(), 6);
  const std::vector<double> dyv = Values(dy);
  Conv2dGrads g = Conv2dBackward(x, w, dy, c.o, true, true).value();
  std::vector<double> dx, dw, db;
  RefBackward(c, Values(x), Values(w), dyv, &dx, &dw, &db);
  ExpectClose(g.dx, dx, 1e-4, 1e-4, "dx");
  ExpectClose(g.dw, dw, 1e-4, 1e-4, "dw");
  ExpectClose(g.db, db, 1e-4, 1e-4, "db");
  // Finite differences of sum(y * dy) in fp32 with eps 1e-2: the loss is linear in x and in w,
  // so only rounding remains; 2e-2 absolute covers it.
  auto loss_x = [&](const Tensor& xp) {
    return Dot(Conv2dForward(xp, w, nullptr, c.o).value(), dyv);
  };
  auto loss_w = [&](const Tensor& wp) {
    return Dot(Conv2dForward(x, wp, nullptr, c.o).value(), dyv);
  };
  ExpectClose(g.dx, NumericGrad(loss_x, x, 1e-2), 2e-2, 1e-2, "dx vs finite differences");
  ExpectClose(g.dw, NumericGrad(loss_w, w, 1e-2), 2e-2, 1e-2, "dw vs finite differences");
  // need_dx / need_db false leave those undefined.
  Conv2dGrads only_w = Conv2dBackward(x, w, dy, c.o, false, false).value();
  EXPECT_FALSE(only_w.dx.defined());
  EXPECT_FALSE(only_w.db.defined());
  ExpectClose(only_w.dw, dw, 1e-4, 1e-4, "dw alone");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dTest,
    ::testing::Values(Case{2, 1, 7, 6, 4, 3, 3, {}}, Case{2, 3, 8, 8, 5, 3, 3, {1, 1, 1, 1}},
                      Case{1, 2, 9, 7, 3, 3, 2, {2, 2, 1, 0}}, Case{3, 4, 5, 5, 2, 1, 1, {}},
                      Case{1, 3, 6, 5, 2, 2, 3, {2, 1, 0, 1}}, Case{1, 17, 4, 4, 5, 3, 3, {}}));

TEST(Conv2dLayoutTest, OutputIsChannelsLastAndInputLayoutDoesNotMatter) {
  Case c{2, 3, 6, 5, 4, 3, 3, {1, 1, 1, 1}};
  Tensor x = RandomTensor({c.n, c.c, c.h, c.w}, 7);
  Tensor w = RandomTensor({c.k, c.c, c.r, c.s}, 8);
  Tensor y = Conv2dForward(x, w, nullptr, c.o).value();
  EXPECT_EQ(y.strides()[1], 1);
  // The channels-last output fed back in (as the next conv would get it) gives the same result
  // as its NCHW-contiguous copy.
  Tensor w2 = RandomTensor({2, 4, 3, 3}, 9);
  Tensor z1 = Conv2dForward(y, w2, nullptr, c.o).value();
  Tensor z2 = Conv2dForward(y.Contiguous().value(), w2, nullptr, c.o).value();
  EXPECT_EQ(Values(z1), Values(z2));
  // Deterministic run to run.
  EXPECT_EQ(Values(Conv2dForward(x, w, nullptr, c.o).value()), Values(y));
}

TEST(Conv2dErrorTest, BadArgumentsAreInvalidArgument) {
  Tensor x = RandomTensor({1, 3, 5, 5}, 1);
  Tensor w = RandomTensor({2, 3, 3, 3}, 2);
  Tensor b = RandomTensor({2}, 3);
  auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code(Conv2dForward(RandomTensor({3, 5, 5}, 1), w, nullptr, {}).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Conv2dForward(x, RandomTensor({2, 4, 3, 3}, 1), nullptr, {}).status()),
            absl::StatusCode::kInvalidArgument);
  Tensor bad_b = RandomTensor({3}, 3);
  absl::Status s = Conv2dForward(x, w, &bad_b, {}).status();
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[3]"), std::string::npos) << s;
  EXPECT_EQ(code(Conv2dForward(x, RandomTensor({2, 3, 7, 7}, 1), nullptr, {}).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Conv2dForward(x, w, nullptr, {0, 1, 0, 0}).status()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Conv2dForward(x, w, nullptr, {1, 1, -1, 0}).status()),
            absl::StatusCode::kInvalidArgument);
  Tensor xi = Tensor::Zeros({1, 3, 5, 5}, DType::kInt32).value();
  EXPECT_EQ(code(Conv2dForward(xi, w, nullptr, {}).status()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Conv2dForward(Tensor(), w, nullptr, {}).status()),
            absl::StatusCode::kInvalidArgument);
  s = Conv2dBackward(x, w, RandomTensor({1, 2, 4, 4}, 1), {}, true, true).status();
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[1, 2, 3, 3]"), std::string::npos) << s;
  EXPECT_EQ(code(Conv2dBackward(x, w, RandomTensor({1, 2, 3}, 1), {}, true, true).status()),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
