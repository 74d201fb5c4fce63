// LARS and LAMB against independent double-precision references over several steps (a decayed,
// adapted matrix and an excluded bias), the trust ratio's special cases (zero weights, zero
// gradient), bitwise determinism on lengths that are not multiples of the vector width, and
// option errors.
#include <cmath>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "tests/optim/optim_testing.h"

namespace paddle::optim {
namespace {

double Norm(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

struct LarsReference {
  explicit LarsReference(LarsOptions options) : o(std::move(options)) {}

  LarsOptions o;
  std::vector<double> v;

  void Step(double lr, std::vector<double>& w, const std::vector<double>& g, bool excluded) {
    if (v.empty()) v.assign(w.size(), 0.0);
    const double wd = excluded ? 0.0 : o.weight_decay;
    const double wn = Norm(w), gn = Norm(g);
    const double trust = (excluded || wn == 0.0 || gn == 0.0) ? 1.0 : o.eta * wn / (gn + wd * wn);
    for (size_t i = 0; i < w.size(); ++i) {
      v[i] = o.momentum * v[i] + lr * trust * (g[i] + wd * w[i]);
      w[i] -= v[i];
    }
  }
};

struct LambReference {
  explicit LambReference(LambOptions options) : o(std::move(options)) {}

  LambOptions o;
  std::vector<double> m, v;
  int t = 0;

  void Step(double lr, std::vector<double>& w, const std::vector<double>& g, bool excluded) {
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
    ++t;
    const double wd = excluded ? 0.0 : o.weight_decay;
    std::vector<double> u(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1.0 - std::pow(o.beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(o.beta2, t));
      u[i] = m_hat / (std::sqrt(v_hat) + o.eps) + wd * w[i];
    }
    const double wn = Norm(w), un = Norm(u);
    const double trust = (excluded || wn == 0.0 || un == 0.0) ? 1.0 : wn / un;
    for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * trust * u[i];
  }
};

template <typename Opt, typename Options, typename Reference>
void CheckAgainstReference(Options o, DType dtype, double rtol) {
  // 1003 elements: 125 full lanes of 8 plus a tail of 3.
  std::vector<double> w_ref = Random(7, 0, 1003, 0.2, dtype);
  std::vector<double> b_ref = Random(7, 1, 11, 0.2, dtype);
  autograd::Variable w = MakeParam("layer.weight", {17, 59}, w_ref, dtype);
  autograd::Variable b = MakeParam("layer.bias", {11}, b_ref, dtype);
  auto opt = Opt::Create({w, b}, o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_FALSE((*opt)->excluded(0));
  ASSERT_TRUE((*opt)->excluded(1));
  Reference rw(o), rb(o);
  for (int t = 0; t < 5; ++t) {
    const double lr = o.lr * (1.0 + 0.5 * t);
    (*opt)->set_lr(lr);
    std::vector<double> gw = Random(8, t, 1003, 0.01 * (t + 1), dtype);
    std::vector<double> gb = Random(9, t, 11, 0.01, dtype);
    SetGrad(w, gw);
    SetGrad(b, gb);
    ASSERT_TRUE((*opt)->Step().ok());
    rw.Step(lr, w_ref, gw, false);
    rb.Step(lr, b_ref, gb, true);
    ExpectNear(Values(w.data()), w_ref, rtol, rtol * 0.2, "weight, step " + std::to_string(t));
    ExpectNear(Values(b.data()), b_ref, rtol, rtol * 0.2, "bias, step " + std::to_string(t));
  }
}

TEST(LarsTest, MatchesDoubleReference) {
  LarsOptions o;
  o.lr = 2.0;  // LARS rates are large: the trust ratio (~eta) scales them down
  o.eta = 0.02;
  o.weight_decay = 1e-3;
  CheckAgainstReference<Lars, LarsOptions, LarsReference>(o, DType::kFloat32, 2e-6);
  CheckAgainstReference<Lars, LarsOptions, LarsReference>(o, DType::kFloat64, 1e-13);
}

TEST(LambTest, MatchesDoubleReference) {
  LambOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.05;
  CheckAgainstReference<Lamb, LambOptions, LambReference>(o, DType::kFloat32, 5e-6);
  CheckAgainstReference<Lamb, LambOptions, LambReference>(o, DType::kFloat64, 1e-12);
}

TEST(LarsTest, Defaults) {
  LarsOptions o;
  EXPECT_EQ(o.eta, 0.001);
  EXPECT_EQ(o.momentum, 0.9);
  EXPECT_EQ(o.weight_decay, 5e-4);
}

// With zero weights the trust ratio is 1, so the first update is plain lr * g.
TEST(LarsTest, ZeroWeightsGiveTrustOne) {
  autograd::Variable w = MakeParam("w", {2, 2}, {0, 0, 0, 0});
  LarsOptions o;
  o.lr = 0.5;
  auto lars = Lars::Create({w}, o);
  ASSERT_TRUE(lars.ok());
  SetGrad(w, {1, -2, 3, 4});
  ASSERT_TRUE((*lars)->Step().ok());
  EXPECT_EQ(Values(w.data()), (std::vector<double>{-0.5, 1.0, -1.5, -2.0}));
}

// A zero gradient also gives trust 1: the update is then only weight decay, lr * wd * w.
TEST(LarsTest, ZeroGradientGivesTrustOne) {
  autograd::Variable w = MakeParam("w", {1, 2}, {1, -2});
  LarsOptions o;
  o.lr = 0.5;
  o.weight_decay = 0.25;
  auto lars = Lars::Create({w}, o);
  ASSERT_TRUE(lars.ok());
  SetGrad(w, {0, 0});
  ASSERT_TRUE((*lars)->Step().ok());
  EXPECT_EQ(Values(w.data()), (std::vector<double>{1 - 0.125, -2 + 0.25}));
}

// LAMB with zero weights and no decay: trust 1, and the first Adam direction is sign(g) (up to
// eps), so w = -lr * sign(g).
TEST(LambTest, ZeroWeightsGiveTrustOne) {
  autograd::Variable w = MakeParam("w", {2, 2}, {0, 0, 0, 0});
  LambOptions o;
  o.lr = 0.5;
  o.eps = 0.0;
  auto lamb = Lamb::Create({w}, o);
  ASSERT_TRUE(lamb.ok());
  SetGrad(w, {1, -2, 3, 4});
  ASSERT_TRUE((*lamb)->Step().ok());
  ExpectNear(Values(w.data()), {-0.5, 0.5, -0.5, -0.5}, 1e-6, 0, "w");
}

// Same inputs, same bits, whatever the length's remainder modulo the lane count.
TEST(LambTest, Deterministic) {
  for (int64_t n : {1, 7, 8, 9, 1001}) {
    std::vector<std::vector<double>> results;
    for (int run = 0; run < 2; ++run) {
      autograd::Variable w = MakeParam("w", {n, 1}, Random(10, n, n, 1.0));
      auto lamb = Lamb::Create({w}, LambOptions{});
      ASSERT_TRUE(lamb.ok());
      for (int t = 0; t < 3; ++t) {
        SetGrad(w, Random(11, t, n, 1.0));
        ASSERT_TRUE((*lamb)->Step().ok());
      }
      results.push_back(Values(w.data()));
    }
    EXPECT_EQ(results[0], results[1]) << "n = " << n;
  }
}

TEST(LarsTest, RejectsBadOptions) {
  autograd::Variable w = MakeParam("w", {2, 2}, {1, 2, 3, 4});
  LarsOptions o;
  o.eta = 0.0;
  auto s = Lars::Create({w}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("eta 0"), std::string::npos) << s.status();
  o = LarsOptions{};
  o.momentum = -1;
  s = Lars::Create({w}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("momentum -1"), std::string::npos) << s.status();
  o = LarsOptions{};
  o.lr = -1;
  s = Lars::Create({w}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("LARS: learning rate"), std::string::npos) << s.status();
}

TEST(LambTest, RejectsBadOptions) {
  autograd::Variable w = MakeParam("w", {2, 2}, {1, 2, 3, 4});
  LambOptions o;
  o.beta2 = 1.0;
  auto s = Lamb::Create({w}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("LAMB: betas must be in [0, 1); got (0.9, 1)"),
            std::string::npos)
      << s.status();
  o = LambOptions{};
  o.weight_decay = -0.01;
  s = Lamb::Create({w}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("weight_decay -0.01"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace paddle::optim
