// SGD against PyTorch's numbers and against an independent double-precision reference over
// several steps: plain, momentum with dampening, Nesterov, weight decay and its exclusion, fp64,
// and option errors.
#include "paddle/optim/sgd.h"

#include <cmath>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/optim/optim_testing.h"

namespace paddle::optim {
namespace {

// The PyTorch comparison inputs: w0[i] = 0.5 - 0.1 i, g_t[i] = 0.3 cos(1.7 i + 0.9 t), shape [2,
// 3].
std::vector<double> TorchW0() {
  std::vector<double> w(6);
  for (int i = 0; i < 6; ++i) w[i] = static_cast<float>(0.5 - 0.1 * i);
  return w;
}
std::vector<double> TorchGrad(int t) {
  std::vector<double> g(6);
  for (int i = 0; i < 6; ++i) g[i] = static_cast<float>(0.3 * std::cos(1.7 * i + 0.9 * t));
  return g;
}

std::vector<double> RunTorchCase(SgdOptions o) {
  autograd::Variable w = MakeParam("w", {2, 3}, TorchW0());
  auto sgd = Sgd::Create({w}, o);
  EXPECT_TRUE(sgd.ok()) << sgd.status();
  for (int t = 0; t < 5; ++t) {
    SetGrad(w, TorchGrad(t));
    EXPECT_TRUE((*sgd)->Step().ok());
  }
  return Values(w.data());
}

// Expected values printed by /usr/bin/python3 with torch 1.13 (Debian python3-torch): a
// torch.nn.Parameter w0 of shape [2, 3], p.grad = g_t for t = 0..4 (inputs above, made in float32),
// opt.step() each time, then the parameter printed with "%.9g".
TEST(SgdTest, MatchesPyTorchMomentumDampening) {
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.dampening = 0.1;
  o.weight_decay = 0.01;
  ExpectNear(RunTorchCase(o),
             {0.401094824f, 0.559485674f, 0.346778631f, 0.0201883558f, 0.0940424278f, 0.178589657f},
             1e-6, 1e-7, "sgd momentum");
}

TEST(SgdTest, MatchesPyTorchNesterov) {
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  ExpectNear(RunTorchCase(o),
             {0.423977464f, 0.60570091f, 0.307879001f, -0.0190838445f, 0.141008183f, 0.204732329f},
             1e-6, 1e-7, "sgd nesterov");
}

// The PyTorch rule, written out in double.
struct SgdReference {
  explicit SgdReference(SgdOptions options) : o(std::move(options)) {}

  SgdOptions o;
  std::vector<double> buf;
  bool first = true;

  void Step(std::vector<double>& w, const std::vector<double>& g, bool excluded) {
    const double wd = excluded ? 0.0 : o.weight_decay;
    if (buf.empty()) buf.assign(w.size(), 0.0);
    for (size_t i = 0; i < w.size(); ++i) {
      double d = g[i] + wd * w[i];
      if (o.momentum != 0.0) {
        buf[i] = first ? d : o.momentum * buf[i] + (1.0 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      w[i] -= o.lr * d;
    }
    first = false;
  }
};

struct SgdCase {
  const char* name;
  double momentum;
  double dampening;
  bool nesterov;
  double weight_decay;
  DType dtype;
};

class SgdReferenceTest : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdReferenceTest, MatchesDoubleReferenceOverSteps) {
  const SgdCase& c = GetParam();
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = c.momentum;
  o.dampening = c.dampening;
  o.nesterov = c.nesterov;
  o.weight_decay = c.weight_decay;
  // A matrix (decayed) and a bias (excluded by default); 37 and 5 elements, not multiples of a
  // vector width.
  std::vector<double> w_ref = Random(1, 0, 37, 1.0, c.dtype);
  std::vector<double> b_ref = Random(1, 1, 5, 1.0, c.dtype);
  autograd::Variable w = MakeParam("w", {37, 1}, w_ref, c.dtype);
  autograd::Variable b = MakeParam("b", {5}, b_ref, c.dtype);
  auto sgd = Sgd::Create({w, b}, o);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_FALSE((*sgd)->excluded(0));
  EXPECT_TRUE((*sgd)->excluded(1));
  SgdReference rw(o), rb(o);
  const double rtol = c.dtype == DType::kFloat32 ? 2e-6 : 1e-13;
  for (int t = 0; t < 6; ++t) {
    std::vector<double> gw = Random(2, t, 37, 0.5, c.dtype);
    std::vector<double> gb = Random(3, t, 5, 0.5, c.dtype);
    SetGrad(w, gw);
    SetGrad(b, gb);
    ASSERT_TRUE((*sgd)->Step().ok());
    rw.Step(w_ref, gw, false);
    rb.Step(b_ref, gb, true);
    ExpectNear(Values(w.data()), w_ref, rtol, rtol, "w");
    ExpectNear(Values(b.data()), b_ref, rtol, rtol, "b");
  }
  EXPECT_EQ((*sgd)->step_count(), 6);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, SgdReferenceTest,
    ::testing::Values(SgdCase{"plain", 0.0, 0.0, false, 0.0, DType::kFloat32},
                      SgdCase{"decay", 0.0, 0.0, false, 0.1, DType::kFloat32},
                      SgdCase{"momentum", 0.9, 0.0, false, 0.1, DType::kFloat32},
                      SgdCase{"dampening", 0.8, 0.3, false, 0.05, DType::kFloat32},
                      SgdCase{"nesterov", 0.9, 0.0, true, 0.1, DType::kFloat32},
                      SgdCase{"momentum_fp64", 0.9, 0.2, false, 0.1, DType::kFloat64},
                      SgdCase{"nesterov_fp64", 0.9, 0.0, true, 0.1, DType::kFloat64}),
    [](const ::testing::TestParamInfo<SgdCase>& info) { return std::string(info.param.name); });

TEST(SgdTest, MomentumSlotOnlyWithMomentum) {
  autograd::Variable w = MakeParam("w", {2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE((*Sgd::Create({w}, SgdOptions{}))->slot_names().empty());
  SgdOptions o;
  o.momentum = 0.5;
  EXPECT_EQ((*Sgd::Create({w}, o))->slot_names(), std::vector<std::string>{"momentum"});
}

TEST(SgdTest, RejectsBadOptions) {
  autograd::Variable w = MakeParam("w", {2, 2}, {1, 2, 3, 4});
  auto expect_error = [&](SgdOptions o, const std::string& text) {
    auto s = Sgd::Create({w}, o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  };
  SgdOptions o;
  o.momentum = -0.1;
  expect_error(o, "momentum -0.1");
  o = SgdOptions{};
  o.weight_decay = -1;
  expect_error(o, "weight_decay -1");
  o = SgdOptions{};
  o.dampening = 1.5;
  expect_error(o, "dampening 1.5");
  o = SgdOptions{};
  o.nesterov = true;
  expect_error(o, "Nesterov momentum needs momentum > 0");
  o.momentum = 0.9;
  o.dampening = 0.1;
  expect_error(o, "dampening 0.1");
  o = SgdOptions{};
  o.lr = -0.5;
  expect_error(o, "learning rate must be >= 0, got -0.5");
}

}  // namespace
}  // namespace paddle::optim
