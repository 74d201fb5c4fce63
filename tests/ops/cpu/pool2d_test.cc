// Max and average pooling against naive loops (max: gradient to the window's argmax; avg: padding
// excluded from the count), finite differences, layouts and error paths.
#include "paddle/ops/cpu/pool2d.h"

#include <limits>

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

struct Case {
  int64_t n, c, h, w;
  Pool2dOptions o;
};

// Reference forward and backward. max: first maximum in window order gets the gradient.
void Ref(bool max, const Case& c, const std::vector<double>& x, const std::vector<double>& dy,
         std::vector<double>* y, std::vector<double>* dx) {
  const auto& o = c.o;
  const int64_t oh = (c.h + 2 * o.pad_h - o.kernel_h) / o.stride_h + 1;
  const int64_t ow = (c.w + 2 * o.pad_w - o.kernel_w) / o.stride_w + 1;
  y->assign(c.n * c.c * oh * ow, 0);
  dx->assign(x.size(), 0);
  for (int64_t p = 0; p < c.n * c.c; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t arg = -1, count = 0;
        for (int64_t r = 0; r < o.kernel_h; ++r)
          for (int64_t s = 0; s < o.kernel_w; ++s) {
            const int64_t hi = i * o.stride_h - o.pad_h + r, wi = j * o.stride_w - o.pad_w + s;
            if (hi < 0 || hi >= c.h || wi < 0 || wi >= c.w) continue;
            const int64_t k = (p * c.h + hi) * c.w + wi;
            if (x[k] > best) best = x[k], arg = k;
            sum += x[k];
            ++count;
          }
        const int64_t yi = (p * oh + i) * ow + j;
        (*y)[yi] = max ? best : sum / count;
        if (max) {
          (*dx)[arg] += dy[yi];
          continue;
        }
        for (int64_t r = 0; r < o.kernel_h; ++r)
          for (int64_t s = 0; s < o.kernel_w; ++s) {
            const int64_t hi = i * o.stride_h - o.pad_h + r, wi = j * o.stride_w - o.pad_w + s;
            if (hi < 0 || hi >= c.h || wi < 0 || wi >= c.w) continue;
            (*dx)[(p * c.h + hi) * c.w + wi] += dy[yi] / count;
          }
      }
}

class Pool2dTest : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(Pool2dTest, MaxAndAvgMatchReferenceAndFiniteDifferences) {
  const Case c = std::get<0>(GetParam());
  Tensor x = RandomTensor({c.n, c.c, c.h, c.w}, 1);
  if (std::get<1>(GetParam())) {  // channels-last input
    Tensor nhwc = x.Transpose(1, 2).value().Transpose(2, 3).value().Clone().value();
    x = nhwc.Transpose(2, 3).value().Transpose(1, 2).value();
    ASSERT_EQ(x.strides()[1], 1);
  }
  const std::vector<double> xv = Values(x);
  MaxPool2dResult mr = MaxPool2dForward(x, c.o).value();
  EXPECT_EQ(mr.y.strides()[1] == 1, x.strides()[1] == 1 && c.c > 1) << "layout kept";
  Tensor dy = RandomTensor(mr.y.shape(), 2);
  const std::vector<double> dyv = Values(dy);
  std::vector<double> y, dx;
  Ref(true, c, xv, dyv, &y, &dx);
  ExpectClose(mr.y, y, 0, 0, "max y");
  ExpectClose(MaxPool2dBackward(x, mr, dy, c.o).value(), dx, 1e-6, 1e-6, "max dx");
  Ref(false, c, xv, dyv, &y, &dx);
  ExpectClose(AvgPool2dForward(x, c.o).value(), y, 1e-5, 1e-5, "avg y");
  Tensor adx = AvgPool2dBackward(x, dy, c.o).value();
  ExpectClose(adx, dx, 1e-5, 1e-5, "avg dx");
  // Random inputs have no ties, so with eps 1e-3 no window's argmax changes: max pooling is
  // locally linear and fp32 rounding (~1e-4 / eps) is the only error.
  auto lmax = [&](const Tensor& t) { return Dot(MaxPool2dForward(t, c.o).value().y, dyv); };
  auto lavg = [&](const Tensor& t) { return Dot(AvgPool2dForward(t, c.o).value(), dyv); };
  ExpectClose(MaxPool2dBackward(x, mr, dy, c.o).value(), NumericGrad(lmax, x, 1e-3), 5e-3, 1e-2,
              "max dx fd");
  ExpectClose(adx, NumericGrad(lavg, x, 1e-3), 5e-3, 1e-2, "avg dx fd");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Pool2dTest,
                         ::testing::Combine(::testing::Values(Case{2, 3, 6, 6, {2, 2, 2, 2}},
                                                              Case{1, 4, 7, 5, {3, 3, 2, 2, 1, 1}},
                                                              Case{2, 2, 5, 8, {3, 2, 1, 2, 1, 0}},
                                                              Case{1, 17, 9, 9, {2, 2, 2, 2}}),
                                            ::testing::Bool()));

TEST(Pool2dErrorTest, BadArgumentsAreInvalidArgument) {
  Tensor x = RandomTensor({1, 2, 4, 4}, 1);
  const Pool2dOptions o{2, 2, 2, 2};
  EXPECT_EQ(MaxPool2dForward(RandomTensor({2, 4, 4}, 1), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaxPool2dForward(x, {0, 2, 2, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaxPool2dForward(x, {2, 2, 2, 2, 2, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AvgPool2dForward(x, {5, 5, 1, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  MaxPool2dResult r = MaxPool2dForward(x, o).value();
  absl::Status s = MaxPool2dBackward(x, r, RandomTensor({1, 2, 3, 2}, 1), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[1, 2, 2, 2]"), std::string::npos) << s;
  MaxPool2dResult no_ws{r.y, Tensor()};
  EXPECT_EQ(MaxPool2dBackward(x, no_ws, r.y, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AvgPool2dBackward(x, RandomTensor({1, 2, 2}, 1), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
