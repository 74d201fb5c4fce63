// Every differentiable operation of paddle/nn/functional, and whole models, checked end to end
// through the autograd engine against central finite differences: loss = sum(op(inputs) * r)
// for a fixed random r, so every output element contributes with its own weight.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/models.h"

namespace paddle::nn {
namespace {

namespace F = functional;

Tensor Random(Shape shape, uint64_t stream, float scale = 1.0f) {
  Tensor t = *Tensor::Empty(shape, DType::kFloat32);
  Philox p(42, stream);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * (2 * p.NextFloat() - 1);
  return t;
}

using Op = std::function<absl::StatusOr<Variable>(const std::vector<Variable>&)>;

// sum(op(inputs) * r) in double, evaluated without recording.
double Objective(const Op& op, const std::vector<Variable>& inputs, const Tensor& r) {
  autograd::NoGradGuard no_grad;
  Variable y = *op(inputs);
  Tensor yc = *y.data().Contiguous();
  double s = 0;
  for (int64_t i = 0; i < yc.numel(); ++i) s += double{yc.data<float>()[i]} * r.data<float>()[i];
  return s;
}

// Checks d objective / d input for every element of every input (or `max_checks` of them).
// Passes when |analytic - numeric| <= atol + rtol * |numeric|.
void GradCheck(const std::string& what, const Op& op, std::vector<Variable> inputs,
               double rtol = 2e-2, double atol = 5e-3, float eps = 1e-2f, int max_checks = 60) {
  SCOPED_TRACE(what);
  absl::StatusOr<Variable> y = op(inputs);
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor r = Random(y->shape(), 99);
  absl::StatusOr<Variable> weighted = F::Mul(*y, Variable(r));
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  // Reduce to a scalar with a linear layer of ones: [1, n] x [1, n]^T.
  int64_t n = weighted->data().numel();
  Variable flat = *F::Reshape(*weighted, {1, n});
  Tensor ones = *Tensor::Empty({1, n}, DType::kFloat32);
  for (int64_t i = 0; i < n; ++i) ones.data<float>()[i] = 1;
  Variable loss = *F::Linear(flat, Variable(ones), Variable());
  ASSERT_TRUE(loss.Backward().ok());

  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    Tensor x = inputs[k].data();
    ASSERT_TRUE(inputs[k].grad().defined()) << "input " << k << " got no gradient";
    int64_t stride = std::max<int64_t>(1, x.numel() / max_checks);
    for (int64_t i = 0; i < x.numel(); i += stride) {
      float saved = x.data<float>()[i];
      x.data<float>()[i] = saved + eps;
      double plus = Objective(op, inputs, r);
      x.data<float>()[i] = saved - eps;
      double minus = Objective(op, inputs, r);
      x.data<float>()[i] = saved;
      double numeric = (plus - minus) / (2 * eps);
      double analytic = inputs[k].grad().data<float>()[i];
      EXPECT_NEAR(analytic, numeric, atol + rtol * std::fabs(numeric))
          << "input " << k << " element " << i;
    }
  }
}

Variable Param(Shape shape, uint64_t stream, float scale = 1.0f) {
  return Variable(Random(shape, stream, scale), /*requires_grad=*/true, "p");
}

TEST(GradCheckTest, LinearConvPool) {
  GradCheck("linear", [](auto& v) { return F::Linear(v[0], v[1], v[2]); },
            {Param({3, 5}, 1), Param({4, 5}, 2), Param({4}, 3)});
  ops::cpu::Conv2dOptions conv;
  conv.stride_h = conv.stride_w = 2;
  conv.pad_h = conv.pad_w = 1;
  GradCheck("conv2d", [conv](auto& v) { return F::Conv2d(v[0], v[1], v[2], conv); },
            {Param({2, 3, 7, 6}, 4), Param({4, 3, 3, 3}, 5), Param({4}, 6)});
  ops::cpu::Conv2dOptions same;  // the ResNet stem: one input channel, padding 1
  same.pad_h = same.pad_w = 1;
  GradCheck(
      "conv2d stem", [same](auto& v) { return F::Conv2d(v[0], v[1], v[2], same); },
      {Param({2, 1, 28, 28}, 22), Param({16, 1, 3, 3}, 23), Variable()}, 2e-2, 5e-3, 1e-2f, 150);
  ops::cpu::Pool2dOptions pool;
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  GradCheck("max_pool2d", [pool](auto& v) { return F::MaxPool2d(v[0], pool); },
            {Param({2, 3, 6, 6}, 7)});
  pool.kernel_h = pool.kernel_w = 3;
  pool.pad_h = pool.pad_w = 1;
  GradCheck("avg_pool2d", [pool](auto& v) { return F::AvgPool2d(v[0], pool); },
            {Param({2, 2, 5, 5}, 8)});
}

TEST(GradCheckTest, Elementwise) {
  GradCheck("relu", [](auto& v) { return F::Relu(v[0]); }, {Param({4, 9}, 9)});
  GradCheck("gelu", [](auto& v) { return F::Gelu(v[0]); }, {Param({4, 9}, 10, 3.0f)});
  GradCheck("add", [](auto& v) { return F::Add(v[0], v[1]); },
            {Param({3, 4}, 11), Param({3, 4}, 12)});
  GradCheck("mul", [](auto& v) { return F::Mul(v[0], v[1]); },
            {Param({3, 4}, 13), Param({3, 4}, 14)});
  GradCheck("reshape", [](auto& v) { return F::Reshape(v[0], {6, -1}); }, {Param({3, 4}, 15)});
  GradCheck("dropout", [](auto& v) { return F::Dropout(v[0], 0.3, 7, 1, 0); }, {Param({5, 8}, 16)});
}

TEST(GradCheckTest, BatchNormSoftmaxEmbedding) {
  Tensor mean = *Tensor::Zeros({3}, DType::kFloat32);
  Tensor var = *Tensor::Zeros({3}, DType::kFloat32);
  GradCheck(
      "batch_norm",
      [&](auto& v) { return F::BatchNorm(v[0], v[1], v[2], &mean, &var, true, 0.1, 1e-5); },
      {Param({4, 3, 3, 2}, 17), Param({3}, 18), Param({3}, 19)}, 3e-2, 1e-2);
  Tensor labels = *Tensor::Empty({5}, DType::kInt64);
  for (int i = 0; i < 5; ++i) labels.data<int64_t>()[i] = (i * 3) % 7;
  GradCheck("softmax_cross_entropy", [&](auto& v) { return F::SoftmaxCrossEntropy(v[0], labels); },
            {Param({5, 7}, 20, 3.0f)});
  Tensor indices = *Tensor::Empty({2, 3}, DType::kInt64);
  for (int i = 0; i < 6; ++i) indices.data<int64_t>()[i] = (i * 2) % 5;  // repeats
  GradCheck("embedding", [&](auto& v) { return F::Embedding(v[0], indices); }, {Param({5, 4}, 21)});
}

// A whole model: gradients of a sample of parameters in every layer, through the loss.
void ModelGradCheck(const std::string& name, int64_t batch, bool eval = false, float eps = 1e-2f,
                    double atol = 2e-4) {
  auto dropout = std::make_shared<Generator>(3, 1);
  std::shared_ptr<Module> model = *MakeModel(name, 5, dropout);
  if (name == "cnn" || eval) model->Eval();  // dropout's mask would change between evaluations
  Tensor x = Random({batch, 1, 28, 28}, 30);
  Tensor labels = *Tensor::Empty({batch}, DType::kInt64);
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = i % 10;
  std::vector<Variable> params = model->Parameters();
  Op op = [&](const std::vector<Variable>&) -> absl::StatusOr<Variable> {
    ASSIGN_OR_RETURN(Variable logits, model->Forward(Variable(x)));
    ASSIGN_OR_RETURN(Variable loss, F::SoftmaxCrossEntropy(logits, labels));
    return F::Reshape(loss, {1});
  };
  // The loss is a batch mean, so gradients are small: a tight absolute tolerance.
  GradCheck(name, op, params, 5e-2, atol, eps, 4);
}

TEST(GradCheckTest, Models) {
  ModelGradCheck("mlp", 4);
  ModelGradCheck("cnn", 2);
  // Batch norm over a small batch makes the loss curve sharply, so the ResNet needs a smaller
  // step (1e-2 misses by 10-30% on some elements); then fp32 rounding of the ~2.3 loss alone is
  // ~1.4e-4 in the quotient (2.3 * 6e-8 / 1e-3), hence the wider absolute tolerance. The stem
  // convolution is checked exactly in LinearConvPool.
  ModelGradCheck("resnet", 4, /*eval=*/false, 1e-3f, 6e-4);
  ModelGradCheck("resnet", 4, /*eval=*/true, 1e-3f, 6e-4);  // frozen statistics
}

}  // namespace
}  // namespace paddle::nn
