// Elementwise, dropout, softmax cross-entropy and embedding against direct references, finite
// differences where there is a gradient, and their error paths.
#include <cmath>

#include "gtest/gtest.h"
#include "paddle/core/philox.h"
#include "paddle/ops/cpu/dropout.h"
#include "paddle/ops/cpu/elementwise.h"
#include "paddle/ops/cpu/embedding.h"
#include "paddle/ops/cpu/softmax_cross_entropy.h"
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

constexpr auto kBad = absl::StatusCode::kInvalidArgument;

Tensor Labels(std::vector<int64_t> v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kInt64).value();
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

TEST(ElementwiseTest, ArithmeticMatchesReference) {
  // Large enough to take the OpenMP path.
  Tensor a = RandomTensor({300, 301}, 1), b = RandomTensor({300, 301}, 2);
  const std::vector<double> av = Values(a), bv = Values(b);
  std::vector<double> sum(av.size()), prod(av.size()), scaled(av.size()), acc(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    sum[i] = static_cast<float>(av[i] + bv[i]);
    prod[i] = static_cast<float>(av[i] * bv[i]);
    scaled[i] = static_cast<float>(av[i] * 3.0);
    acc[i] = static_cast<float>(av[i] + static_cast<float>(-2.0f * static_cast<float>(bv[i])));
  }
  SetNumThreads(2);
  ExpectClose(Add(a, b).value(), sum, 0, 0, "add");
  ExpectClose(Mul(a, b).value(), prod, 0, 0, "mul");
  ExpectClose(Scale(a, 3.0f).value(), scaled, 0, 0, "scale");
  Tensor d = a.Clone().value();
  ASSERT_TRUE(AddInPlace(&d, b, -2.0f).ok());
  ExpectClose(d, acc, 1e-6, 0, "add in place");
  // Same numel, different shape into a flat contiguous buffer.
  Tensor flat = Tensor::Zeros({300 * 301}, DType::kFloat32).value();
  ASSERT_TRUE(AddInPlace(&flat, a).ok());
  EXPECT_EQ(Values(flat), av);
  ASSERT_TRUE(Fill(&d, 0.25f).ok());
  EXPECT_EQ(Values(d), std::vector<double>(av.size(), 0.25));
  // A strided view is filled element by element.
  Tensor col = d.Slice(1, 0, 301, 2).value();
  ASSERT_TRUE(Fill(&col, 1.0f).ok());
  EXPECT_EQ(*d.At<float>({5, 2}).value(), 1.0f);
  EXPECT_EQ(*d.At<float>({5, 3}).value(), 0.25f);
  SetNumThreads(1);
  // Transposed second operand: converted to the first's layout.
  Tensor bt = b.Transpose(0, 1).value().Clone().value().Transpose(0, 1).value();
  EXPECT_EQ(Values(Add(a, bt).value()), sum);
}

TEST(ElementwiseTest, Errors) {
  Tensor a = RandomTensor({3, 4}, 1);
  absl::Status s = Add(a, RandomTensor({4, 3}, 1)).status();
  EXPECT_EQ(s.code(), kBad);
  EXPECT_NE(s.message().find("[4, 3]"), std::string::npos) << s;
  EXPECT_EQ(Mul(a, Tensor::Zeros({3, 4}, DType::kInt32).value()).status().code(), kBad);
  EXPECT_EQ(Scale(Tensor(), 1).status().code(), kBad);
  EXPECT_EQ(AddInPlace(nullptr, a).code(), kBad);
  Tensor small = RandomTensor({5}, 1);
  EXPECT_EQ(AddInPlace(&small, a).code(), kBad);
  Tensor view = RandomTensor({3, 8}, 1).Slice(1, 0, 8, 2).value();
  EXPECT_EQ(AddInPlace(&view, a).code(), kBad);
  EXPECT_EQ(Fill(nullptr, 1).code(), kBad);
}

TEST(DropoutTest, MaskFollowsPhiloxAndBackwardScales) {
  const double p = 0.3;
  Tensor x = RandomTensor({1000, 7}, 1);
  SetNumThreads(2);
  DropoutResult r = DropoutForward(x, p, 42, 3, 5).value();
  SetNumThreads(1);
  Philox ref(42, 3);
  const float scale = static_cast<float>(1 / (1 - p));
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = ref.WordAt(5 + i) >= static_cast<uint64_t>(p * 4294967296.0);
    ASSERT_EQ(r.mask.data<uint8_t>()[i], keep ? 1 : 0) << i;
    ASSERT_EQ(r.y.data<float>()[i], keep ? x.data<float>()[i] * scale : 0.0f) << i;
    kept += keep;
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.numel(), 0.7, 0.03);
  // Same arguments, same mask (any thread count); another offset, another mask.
  EXPECT_EQ(Values(DropoutForward(x, p, 42, 3, 5).value().y), Values(r.y));
  EXPECT_NE(Values(DropoutForward(x, p, 42, 3, 6).value().y), Values(r.y));
  Tensor dy = RandomTensor(x.shape(), 2);
  Tensor dx = DropoutBackward(r.mask, dy, p).value();
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(dx.data<float>()[i], r.mask.data<uint8_t>()[i] ? dy.data<float>()[i] * scale : 0.0f);
  }
  EXPECT_EQ(Values(DropoutForward(x, 0, 1, 0, 0).value().y), Values(x));
}

TEST(DropoutTest, Errors) {
  Tensor x = RandomTensor({3}, 1);
  absl::Status s = DropoutForward(x, 1.0, 0, 0, 0).status();
  EXPECT_EQ(s.code(), kBad);
  EXPECT_NE(s.message().find("p = 1"), std::string::npos) << s;
  EXPECT_EQ(DropoutForward(x, -0.1, 0, 0, 0).status().code(), kBad);
  EXPECT_EQ(DropoutForward(x, std::nan(""), 0, 0, 0).status().code(), kBad);
  DropoutResult r = DropoutForward(x, 0.5, 0, 0, 0).value();
  EXPECT_EQ(DropoutBackward(r.mask, RandomTensor({4}, 1), 0.5).status().code(), kBad);
  EXPECT_EQ(DropoutBackward(x, x, 0.5).status().code(), kBad);  // mask not uint8
  EXPECT_EQ(DropoutBackward(r.mask, x, 1.5).status().code(), kBad);
}

TEST(SoftmaxCrossEntropyTest, MatchesReferenceAndFiniteDifferences) {
  const int64_t n = 4, k = 5;
  Tensor logits = RandomTensor({n, k}, 1, -3, 3);
  logits.data<float>()[0] = 80.0f;  // would overflow exp() without the max subtraction
  Tensor labels = Labels({0, 4, 2, 2});
  const std::vector<double> xv = Values(logits);
  std::vector<double> probs(n * k), grad(n * k);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -1e300, z = 0;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, xv[i * k + j]);
    for (int64_t j = 0; j < k; ++j) z += std::exp(xv[i * k + j] - mx);
    for (int64_t j = 0; j < k; ++j) probs[i * k + j] = std::exp(xv[i * k + j] - mx) / z;
    loss -= std::log(probs[i * k + labels.data<int64_t>()[i]]) / n;
  }
  SoftmaxCrossEntropyResult r = SoftmaxCrossEntropyForward(logits, labels).value();
  EXPECT_EQ(r.loss.dim(), 0);
  EXPECT_NEAR(r.loss.data<float>()[0], loss, 1e-5);
  ExpectClose(r.probs, probs, 1e-6, 1e-5, "probs");
  for (int64_t i = 0; i < n * k; ++i) {
    grad[i] = 2.0 * (probs[i] - (i % k == labels.data<int64_t>()[i / k])) / n;
  }
  Tensor dx = SoftmaxCrossEntropyBackward(r.probs, labels, 2.0f).value();
  ExpectClose(dx, grad, 1e-6, 1e-5, "dlogits");
  auto lf = [&](const Tensor& t) {
    return 2.0 * SoftmaxCrossEntropyForward(t, labels).value().loss.data<float>()[0];
  };
  ExpectClose(dx, NumericGrad(lf, logits, 1e-2), 2e-3, 2e-2, "dlogits fd");
}

TEST(SoftmaxCrossEntropyTest, Errors) {
  Tensor logits = RandomTensor({3, 4}, 1);
  absl::Status s = SoftmaxCrossEntropyForward(logits, Labels({0, 4, 1})).status();
  EXPECT_EQ(s.code(), kBad);
  EXPECT_NE(s.message().find("labels[1] = 4"), std::string::npos) << s;
  EXPECT_EQ(SoftmaxCrossEntropyForward(logits, Labels({0, -1, 1})).status().code(), kBad);
  EXPECT_EQ(SoftmaxCrossEntropyForward(logits, Labels({0, 1})).status().code(), kBad);
  EXPECT_EQ(SoftmaxCrossEntropyForward(RandomTensor({3}, 1), Labels({0, 1, 1})).status().code(),
            kBad);
  EXPECT_EQ(SoftmaxCrossEntropyForward(logits, RandomTensor({3}, 1)).status().code(), kBad);
  EXPECT_EQ(SoftmaxCrossEntropyBackward(logits, Labels({0, 9, 1}), 1).status().code(), kBad);
  EXPECT_EQ(SoftmaxCrossEntropyForward(RandomTensor({0, 4}, 1), Labels({})).status().code(), kBad);
}

TEST(EmbeddingTest, GatherAndScatterAdd) {
  Tensor w = RandomTensor({6, 3}, 1);
  Tensor idx = Tensor::Empty({2, 2}, DType::kInt64).value();
  const int64_t iv[] = {5, 0, 5, 2};
  for (int i = 0; i < 4; ++i) idx.data<int64_t>()[i] = iv[i];
  Tensor y = EmbeddingForward(w, idx).value();
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  const std::vector<double> wv = Values(w);
  std::vector<double> want;
  for (int64_t i : iv)
    for (int j = 0; j < 3; ++j) want.push_back(wv[i * 3 + j]);
  ExpectClose(y, want, 0, 0, "y");
  Tensor dy = RandomTensor({2, 2, 3}, 2);
  const std::vector<double> dyv = Values(dy);
  Tensor dw = EmbeddingBackward(idx, dy, 6).value();
  std::vector<double> dwant(18, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) dwant[iv[i] * 3 + j] += dyv[i * 3 + j];
  ExpectClose(dw, dwant, 1e-6, 0, "dw");
  auto lf = [&](const Tensor& t) { return Dot(EmbeddingForward(t, idx).value(), dyv); };
  ExpectClose(dw, NumericGrad(lf, w, 1e-2), 1e-3, 1e-2, "dw fd");
}

TEST(EmbeddingTest, Errors) {
  Tensor w = RandomTensor({6, 3}, 1);
  absl::Status s = EmbeddingForward(w, Labels({1, 6})).status();
  EXPECT_EQ(s.code(), kBad);
  EXPECT_NE(s.message().find("position 1) = 6"), std::string::npos) << s;
  EXPECT_EQ(EmbeddingForward(w, Labels({-1})).status().code(), kBad);
  EXPECT_EQ(EmbeddingForward(RandomTensor({6}, 1), Labels({1})).status().code(), kBad);
  EXPECT_EQ(EmbeddingForward(w, RandomTensor({2}, 1)).status().code(), kBad);
  EXPECT_EQ(EmbeddingBackward(Labels({1, 7}), RandomTensor({2, 3}, 1), 6).status().code(), kBad);
  EXPECT_EQ(EmbeddingBackward(Labels({1, 2}), RandomTensor({3, 3}, 1), 6).status().code(), kBad);
  EXPECT_EQ(EmbeddingBackward(Labels({1, 2}), RandomTensor({2, 3}, 1), -1).status().code(), kBad);
}

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
