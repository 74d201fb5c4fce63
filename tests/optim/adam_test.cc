// Adam and AdamW against PyTorch's numbers and an independent double-precision reference over
// several steps, including per-parameter bias correction when a parameter misses steps, the
// exclusion of biases from weight decay, fp64, and option errors.
#include "paddle/optim/adam.h"

#include <cmath>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/optim/optim_testing.h"

namespace paddle::optim {
namespace {

// Inputs as in sgd_test.cc: w0[i] = 0.5 - 0.1 i, g_t[i] = 0.3 cos(1.7 i + 0.9 t), shape [2, 3].
std::vector<double> RunTorchCase(AdamOptions o) {
  std::vector<double> w0(6);
  for (int i = 0; i < 6; ++i) w0[i] = static_cast<float>(0.5 - 0.1 * i);
  autograd::Variable w = MakeParam("w", {2, 3}, w0);
  auto adam = Adam::Create({w}, o);
  EXPECT_TRUE(adam.ok()) << adam.status();
  for (int t = 0; t < 5; ++t) {
    std::vector<double> g(6);
    for (int i = 0; i < 6; ++i) g[i] = static_cast<float>(0.3 * std::cos(1.7 * i + 0.9 * t));
    SetGrad(w, g);
    EXPECT_TRUE((*adam)->Step().ok());
  }
  return Values(w.data());
}

// Expected values printed by /usr/bin/python3 with torch 1.13 (Debian python3-torch): a
// torch.nn.Parameter w0 of shape [2, 3], p.grad = g_t for t = 0..4 (made in float32),
// opt.step() each time, then the parameter printed with "%.9g".
TEST(AdamTest, MatchesPyTorchAdam) {
  // torch.optim.Adam([p], lr=0.01, weight_decay=0.01)
  AdamOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  ExpectNear(RunTorchCase(o),
             {0.475700736f, 0.440236956f, 0.317408502f, 0.159439534f, 0.0888758227f, 0.0384743474f},
             1e-6, 1e-7, "adam");
}

TEST(AdamTest, MatchesPyTorchAdamW) {
  // torch.optim.AdamW([p], lr=0.01) (weight_decay defaults to 0.01)
  AdamOptions o = AdamWOptions();
  o.lr = 0.01;
  ExpectNear(RunTorchCase(o),
             {0.476019502f, 0.440369546f, 0.317670971f, 0.159471661f, 0.0889669135f, 0.0384809077f},
             1e-6, 1e-7, "adamw");
}

TEST(AdamTest, AdamWDefaults) {
  AdamOptions o = AdamWOptions();
  EXPECT_TRUE(o.decoupled_weight_decay);
  EXPECT_EQ(o.weight_decay, 1e-2);
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.eps, 1e-8);
}

// The rule written out in double; t is the parameter's own update count.
struct AdamReference {
  explicit AdamReference(AdamOptions options) : o(std::move(options)) {}

  AdamOptions o;
  std::vector<double> m, v;
  int t = 0;

  void Step(double lr, std::vector<double>& w, const std::vector<double>& g, bool excluded) {
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
    ++t;
    const double wd = excluded ? 0.0 : o.weight_decay;
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i];
      if (o.decoupled_weight_decay) {
        w[i] *= 1.0 - lr * wd;
      } else {
        gi += wd * w[i];
      }
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * gi * gi;
      const double m_hat = m[i] / (1.0 - std::pow(o.beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(o.beta2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

struct AdamCase {
  const char* name;
  bool decoupled;
  DType dtype;
};

class AdamReferenceTest : public ::testing::TestWithParam<AdamCase> {};

// Two parameters; the bias has no gradient on the first two steps (no backward pass reached it
// yet), so its bias correction must count its own updates from 1, not the optimizer's steps. The
// learning rate changes between steps, as a schedule would change it.
TEST_P(AdamReferenceTest, MatchesDoubleReferenceOverSteps) {
  const AdamCase& c = GetParam();
  AdamOptions o;
  o.lr = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  o.decoupled_weight_decay = c.decoupled;
  std::vector<double> w_ref = Random(4, 0, 41, 1.0, c.dtype);
  std::vector<double> b_ref = Random(4, 1, 3, 1.0, c.dtype);
  autograd::Variable w = MakeParam("w", {41, 1}, w_ref, c.dtype);
  autograd::Variable b = MakeParam("b", {3}, b_ref, c.dtype);
  auto adam = Adam::Create({w, b}, o);
  ASSERT_TRUE(adam.ok()) << adam.status();
  AdamReference rw(o), rb(o);
  const double rtol = c.dtype == DType::kFloat32 ? 5e-6 : 1e-12;
  for (int t = 0; t < 6; ++t) {
    const double lr = 0.01 * (t + 1);
    (*adam)->set_lr(lr);
    std::vector<double> gw = Random(5, t, 41, 0.5, c.dtype);
    SetGrad(w, gw);
    rw.Step(lr, w_ref, gw, false);
    if (t >= 2) {
      std::vector<double> gb = Random(6, t, 3, 0.5, c.dtype);
      SetGrad(b, gb);
      rb.Step(lr, b_ref, gb, true);
    }
    ASSERT_TRUE((*adam)->Step().ok());
    ExpectNear(Values(w.data()), w_ref, rtol, rtol, "w");
    ExpectNear(Values(b.data()), b_ref, rtol, rtol, "b");
  }
  EXPECT_EQ((*adam)->step_count(), 6);
  EXPECT_EQ((*adam)->param_step(0), 6);
  EXPECT_EQ((*adam)->param_step(1), 4);
}

INSTANTIATE_TEST_SUITE_P(Variants, AdamReferenceTest,
                         ::testing::Values(AdamCase{"adam", false, DType::kFloat32},
                                           AdamCase{"adamw", true, DType::kFloat32},
                                           AdamCase{"adam_fp64", false, DType::kFloat64},
                                           AdamCase{"adamw_fp64", true, DType::kFloat64}),
                         [](const ::testing::TestParamInfo<AdamCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(AdamTest, RejectsBadOptions) {
  autograd::Variable w = MakeParam("w", {2, 2}, {1, 2, 3, 4});
  auto expect_error = [&](AdamOptions o, const std::string& text) {
    auto s = Adam::Create({w}, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  };
  AdamOptions o;
  o.beta1 = 1.0;
  expect_error(o, "Adam: betas must be in [0, 1); got (1, 0.999)");
  o = AdamWOptions();
  o.beta2 = -0.5;
  expect_error(o, "AdamW: betas must be in [0, 1); got (0.9, -0.5)");
  o = AdamOptions{};
  o.eps = -1e-8;
  expect_error(o, "eps -1e-08");
  o = AdamOptions{};
  o.weight_decay = -0.1;
  expect_error(o, "weight_decay -0.1");
  o = AdamOptions{};
  o.lr = -1;
  expect_error(o, "Adam: learning rate must be >= 0");
}

}  // namespace
}  // namespace paddle::optim
