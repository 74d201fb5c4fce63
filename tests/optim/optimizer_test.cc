// What every optimizer shares: parameter validation, the exclusion rule, skipping parameters
// without a gradient, Step's all-or-nothing checks, ZeroGrad, and checkpoint state (a save/load
// round trip continues the trajectory bit for bit; bad state is rejected and loads nothing), and
// the version bump of every updated parameter.
#include "paddle/optim/optimizer.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/core/autograd/engine.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/sgd.h"
#include "tests/optim/optim_testing.h"

namespace paddle::optim {
namespace {

using MakeOptimizer =
    std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(std::vector<autograd::Variable>)>;

template <typename Opt, typename Options>
MakeOptimizer Maker(Options o) {
  return [o](std::vector<autograd::Variable> params) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
    auto opt = Opt::Create(std::move(params), o);
    if (!opt.ok()) return opt.status();
    return std::unique_ptr<Optimizer>(std::move(*opt));
  };
}

SgdOptions MomentumSgd() {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  return o;
}

bool HasSubstr(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(OptimizerTest, RejectsBadParameters) {
  MakeOptimizer make = Maker<Sgd>(SgdOptions{});
  autograd::Variable ok = MakeParam("ok", {2}, {1, 2});

  absl::Status s = make({ok, autograd::Variable()}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasSubstr(s, "parameter #1 is undefined")) << s;

  s = make({ok, MakeParam("", {3}, {1, 2, 3})}).status();
  EXPECT_TRUE(HasSubstr(s, "parameter #1 (float32[3] on cpu) has no name")) << s;

  s = make({ok, MakeParam("ok", {1}, {1})}).status();
  EXPECT_TRUE(HasSubstr(s, "parameter name 'ok' (#1) is used by an earlier parameter")) << s;

  Tensor ints = *Tensor::Zeros({2}, DType::kInt32);
  s = make({autograd::Variable(ints, true, "counts")}).status();
  EXPECT_TRUE(HasSubstr(s, "parameter 'counts' is int32[2] on cpu")) << s;

  Tensor transposed = *MakeTensor({2, 3}, {1, 2, 3, 4, 5, 6}).Transpose(0, 1);
  s = make({autograd::Variable(transposed, true, "t")}).status();
  EXPECT_TRUE(HasSubstr(s, "(not contiguous)")) << s;

  // SGD updates float32 CUDA parameters (Note [CUDA parameters]); other dtypes are rejected.
  double fake[2];
  Tensor on_gpu = *Tensor::FromBlob(fake, {2}, DType::kFloat64, Device::Cuda(0));
  s = make({autograd::Variable(on_gpu, true, "gpu")}).status();
  EXPECT_TRUE(HasSubstr(s, "parameter 'gpu' is float64[2] on cuda")) << s;
  EXPECT_TRUE(HasSubstr(s, "CUDA parameters must be contiguous float32")) << s;
}

TEST(OptimizerTest, DefaultExclusionIsBelowTwoDimensions) {
  autograd::Variable scalar = MakeParam("scale", {}, {1});
  autograd::Variable bias = MakeParam("bias", {4}, {1, 2, 3, 4});
  autograd::Variable weight = MakeParam("weight", {2, 2}, {1, 2, 3, 4});
  autograd::Variable conv = MakeParam("conv", {1, 1, 1, 2}, {1, 2});
  auto sgd = Sgd::Create({scalar, bias, weight, conv}, SgdOptions{});
  ASSERT_TRUE(sgd.ok());
  EXPECT_TRUE((*sgd)->excluded(0));
  EXPECT_TRUE((*sgd)->excluded(1));
  EXPECT_FALSE((*sgd)->excluded(2));
  EXPECT_FALSE((*sgd)->excluded(3));
}

TEST(OptimizerTest, ExclusionPredicateOverridesDefault) {
  autograd::Variable bias = MakeParam("bias", {2}, {1, 1});
  autograd::Variable emb = MakeParam("embedding", {2, 1}, {1, 1});
  SgdOptions o;
  o.lr = 1.0;
  o.weight_decay = 0.5;
  o.exclude = [](const std::string& name, const autograd::Variable&) {
    return name == "embedding";
  };
  auto sgd = Sgd::Create({bias, emb}, o);
  ASSERT_TRUE(sgd.ok());
  EXPECT_FALSE((*sgd)->excluded(0));
  EXPECT_TRUE((*sgd)->excluded(1));
  SetGrad(bias, {0, 0});
  SetGrad(emb, {0, 0});
  ASSERT_TRUE((*sgd)->Step().ok());
  EXPECT_EQ(Values(bias.data()), (std::vector<double>{0.5, 0.5}));  // decayed
  EXPECT_EQ(Values(emb.data()), (std::vector<double>{1, 1}));       // not decayed

  o.exclude = ExcludeNone();
  EXPECT_FALSE((*Sgd::Create({bias}, o))->excluded(0));
}

// A parameter no backward pass reached keeps its value, state and update count.
TEST(OptimizerTest, SkipsParametersWithoutGradient) {
  autograd::Variable a = MakeParam("a", {2, 1}, {1, 2});
  autograd::Variable b = MakeParam("b", {2, 1}, {3, 4});
  auto sgd = Sgd::Create({a, b}, MomentumSgd());
  ASSERT_TRUE(sgd.ok());
  SetGrad(a, {1, 1});
  ASSERT_TRUE((*sgd)->Step().ok());
  ASSERT_TRUE((*sgd)->Step().ok());
  EXPECT_EQ((*sgd)->step_count(), 2);
  EXPECT_EQ((*sgd)->param_step(0), 2);
  EXPECT_EQ((*sgd)->param_step(1), 0);
  EXPECT_NE(Values(a.data()), (std::vector<double>{1, 2}));
  EXPECT_EQ(Values(b.data()), (std::vector<double>{3, 4}));
  EXPECT_EQ(Values((*sgd)->state(1, 0)), (std::vector<double>{0, 0}));
}

TEST(OptimizerTest, ZeroGradZeroesInPlace) {
  autograd::Variable a = MakeParam("a", {2}, {1, 2});
  autograd::Variable b = MakeParam("b", {2}, {1, 2});
  auto sgd = Sgd::Create({a, b}, SgdOptions{});
  ASSERT_TRUE(sgd.ok());
  SetGrad(a, {5, 6});
  const void* memory = a.grad().data();
  (*sgd)->ZeroGrad();
  EXPECT_EQ(a.grad().data(), memory);
  EXPECT_EQ(Values(a.grad()), (std::vector<double>{0, 0}));
  EXPECT_FALSE(b.grad().defined());
}

// Note [Saved tensor versions]: a step between a forward pass that saved a parameter and its
// backward makes that backward fail (as in PyTorch), and only for the parameters that moved.
TEST(OptimizerTest, StepBetweenForwardAndBackwardFailsThatBackward) {
  autograd::Variable a = MakeParam("a", {2}, {1, 2});
  autograd::Variable b = MakeParam("b", {2}, {3, 4});
  // y = a * b elementwise, saving both: each one's gradient needs the other's value.
  auto product = [&]() {
    Tensor out = MakeTensor({2}, {1 * 3, 2 * 4});
    return autograd::RecordOperation(out, "mul", {a.GradientEdge(), b.GradientEdge()},
                                     {{"input a", a.data()}, {"input b", b.data()}},
                                     [](const Tensor& g) -> absl::StatusOr<std::vector<Tensor>> {
                                       return std::vector<Tensor>{g, g};
                                     });
  };
  auto sgd = Sgd::Create({a, b}, SgdOptions{});
  ASSERT_TRUE(sgd.ok());
  const uint64_t before = b.data().version();
  autograd::Variable y = product();
  SetGrad(a, {1, 1});  // from an earlier backward; b has none and is skipped
  ASSERT_TRUE((*sgd)->Step().ok());
  EXPECT_EQ(a.data().version(), 1u);
  EXPECT_EQ(b.data().version(), before);
  absl::Status s = autograd::RunBackward(y, MakeTensor({2}, {1, 1}));
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message())
                .find("its input a (float32[2] on cpu), was modified by an "
                      "in-place operation: it is at version 1, mul saved it "
                      "at version 0"),
            std::string::npos)
      << s;
  // Forward again after the step: the usual order works.
  (*sgd)->ZeroGrad();
  ASSERT_TRUE(autograd::RunBackward(product(), MakeTensor({2}, {1, 1})).ok());
  EXPECT_EQ(Values(b.grad()), (std::vector<double>{1, 1}));
}

// A bad parameter found while checking leaves every parameter, even earlier ones, untouched.
TEST(OptimizerTest, StepIsAllOrNothing) {
  autograd::Variable a = MakeParam("a", {2, 2}, {1, 2, 3, 4});
  autograd::Variable b = MakeParam("b", {2, 2}, {1, 2, 3, 4});
  auto sgd = Sgd::Create({a, b}, SgdOptions{});
  ASSERT_TRUE(sgd.ok());
  SetGrad(a, {1, 1, 1, 1});
  SetGrad(b, {1, 1, 1, 1});
  ASSERT_TRUE(b.set_data(*MakeTensor({2, 2}, {1, 2, 3, 4}).Transpose(0, 1)).ok());
  absl::Status s = (*sgd)->Step();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(HasSubstr(s, "step 1: parameter 'b' is now float32[2, 2] on cpu")) << s;
  EXPECT_EQ(Values(a.data()), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ((*sgd)->step_count(), 0);
  EXPECT_EQ((*sgd)->param_step(0), 0);

  // A gradient on another device than its parameter is refused when set (and by accumulation),
  // so Step never sees one.
  float fake[4];
  ASSERT_TRUE(b.set_data(MakeTensor({2, 2}, {1, 2, 3, 4})).ok());
  s = b.set_grad(*Tensor::FromBlob(fake, {2, 2}, DType::kFloat32, Device::Cuda(0)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasSubstr(s, "got float32[2, 2] on cuda:0")) << s;
  // A parameter moved to the GPU after Create: Step refuses before anything moves.
  ASSERT_TRUE(b.set_data(*Tensor::FromBlob(fake, {2, 2}, DType::kFloat32, Device::Cuda(0))).ok());
  b.ResetGrad();
  ASSERT_TRUE(b.set_grad(*Tensor::FromBlob(fake, {2, 2}, DType::kFloat32, Device::Cuda(0))).ok());
  s = (*sgd)->Step();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(HasSubstr(s, "parameter 'b' is now float32[2, 2] on cuda:0")) << s;
  EXPECT_EQ(Values(a.data()), (std::vector<double>{1, 2, 3, 4}));
}

struct Trajectory {
  std::vector<std::vector<double>> values;  // per parameter after the last step
  std::vector<std::vector<double>> states;  // every slot of every parameter
};

// Parameters "w" [4, 3] and "b" [3]; b first gets a gradient on step 2.
std::vector<autograd::Variable> MakeModel() {
  return {MakeParam("w", {4, 3}, Random(20, 0, 12, 1.0)),
          MakeParam("b", {3}, Random(20, 1, 3, 1.0))};
}

void RunSteps(Optimizer& opt, std::vector<autograd::Variable>& params, int from, int to) {
  for (int t = from; t < to; ++t) {
    opt.set_lr(0.01 * (1 + t));
    SetGrad(params[0], Random(21, t, 12, 0.5));
    if (t >= 2) SetGrad(params[1], Random(22, t, 3, 0.5));
    ASSERT_TRUE(opt.Step().ok());
  }
}

Trajectory Capture(const Optimizer& opt, const std::vector<autograd::Variable>& params) {
  Trajectory tr;
  for (const auto& p : params) tr.values.push_back(Values(p.data()));
  for (int64_t i = 0; i < opt.num_params(); ++i) {
    for (size_t s = 0; s < opt.slot_names().size(); ++s) {
      tr.states.push_back(Values(opt.state(i, static_cast<int>(s))));
    }
  }
  return tr;
}

class StateTest : public ::testing::TestWithParam<std::pair<const char*, MakeOptimizer>> {};

// Run 1..3, save, run 4..7: the same as a fresh optimizer loaded from the save running 4..7.
TEST_P(StateTest, SaveLoadContinuesIdentically) {
  const MakeOptimizer& make = GetParam().second;
  std::vector<autograd::Variable> params = MakeModel();
  auto opt = make(params);
  ASSERT_TRUE(opt.ok()) << opt.status();
  RunSteps(**opt, params, 0, 3);

  std::map<std::string, Tensor> tensors;
  std::map<std::string, int64_t> ints = {{"model/epoch", 7}};
  ASSERT_TRUE((*opt)->SaveState(&tensors, &ints).ok());
  EXPECT_EQ(ints["optim/step"], 3);
  EXPECT_EQ(ints["optim/w/step"], 3);
  EXPECT_EQ(ints["optim/b/step"], 1);
  EXPECT_EQ(ints["model/epoch"], 7);
  EXPECT_EQ(tensors.size(), 2 * (*opt)->slot_names().size());
  for (const std::string& slot : (*opt)->slot_names()) {
    ASSERT_EQ(tensors.count("optim/w/" + slot), 1u) << slot;
    EXPECT_EQ(tensors["optim/w/" + slot].shape(), (Shape{4, 3}));
  }
  std::vector<std::vector<double>> saved_values;
  for (const auto& p : params) saved_values.push_back(Values(p.data()));

  RunSteps(**opt, params, 3, 7);
  const Trajectory expected = Capture(**opt, params);

  std::vector<autograd::Variable> fresh = MakeModel();
  for (size_t i = 0; i < fresh.size(); ++i) {
    ASSERT_TRUE(fresh[i].set_data(MakeTensor(fresh[i].shape(), saved_values[i])).ok());
  }
  auto resumed = make(fresh);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->LoadState(tensors, ints).ok());
  EXPECT_EQ((*resumed)->step_count(), 3);
  EXPECT_EQ((*resumed)->param_step(1), 1);
  RunSteps(**resumed, fresh, 3, 7);
  const Trajectory actual = Capture(**resumed, fresh);
  EXPECT_EQ(actual.values, expected.values);  // bit for bit
  EXPECT_EQ(actual.states, expected.states);
}

TEST_P(StateTest, RejectsBadStateAndLoadsNothing) {
  const MakeOptimizer& make = GetParam().second;
  std::vector<autograd::Variable> params = MakeModel();
  auto opt = make(params);
  ASSERT_TRUE(opt.ok());
  RunSteps(**opt, params, 0, 3);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int64_t> ints;
  ASSERT_TRUE((*opt)->SaveState(&tensors, &ints).ok());
  EXPECT_FALSE((*opt)->SaveState(nullptr, &ints).ok());

  auto target = make(MakeModel());
  ASSERT_TRUE(target.ok());
  auto expect_error = [&](const std::map<std::string, Tensor>& t,
                          const std::map<std::string, int64_t>& n, absl::StatusCode code,
                          const std::string& text) {
    absl::Status s = (*target)->LoadState(t, n);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_TRUE(HasSubstr(s, text)) << s;
    EXPECT_EQ((*target)->step_count(), 0);
    EXPECT_EQ((*target)->param_step(0), 0);
    for (size_t slot = 0; slot < (*target)->slot_names().size(); ++slot) {
      EXPECT_EQ(Values((*target)->state(0, static_cast<int>(slot))), std::vector<double>(12, 0.0));
    }
  };

  auto ints_bad = ints;
  ints_bad.erase("optim/step");
  expect_error(tensors, ints_bad, absl::StatusCode::kNotFound, "missing integer 'optim/step'");
  ints_bad = ints;
  ints_bad.erase("optim/b/step");
  expect_error(tensors, ints_bad, absl::StatusCode::kNotFound, "missing integer 'optim/b/step'");
  ints_bad = ints;
  ints_bad["optim/w/step"] = -2;
  expect_error(tensors, ints_bad, absl::StatusCode::kInvalidArgument,
               "'optim/w/step' is -2, must be >= 0");

  const std::vector<std::string>& slots = (*opt)->slot_names();
  if (slots.empty()) return;
  const std::string key = "optim/b/" + slots.back();
  auto tensors_bad = tensors;
  tensors_bad.erase(key);
  expect_error(tensors_bad, ints, absl::StatusCode::kNotFound,
               "missing tensor '" + key + "' (expected float32[3] on cpu)");
  tensors_bad = tensors;
  tensors_bad[key] = *Tensor::Zeros({4}, DType::kFloat32);
  expect_error(tensors_bad, ints, absl::StatusCode::kInvalidArgument,
               "tensor '" + key + "' is float32[4] on cpu, expected float32[3] on cpu");
  tensors_bad[key] = *Tensor::Zeros({3}, DType::kFloat64);
  expect_error(tensors_bad, ints, absl::StatusCode::kInvalidArgument,
               "is float64[3] on cpu, expected float32[3] on cpu");
  tensors_bad[key] = Tensor();
  expect_error(tensors_bad, ints, absl::StatusCode::kInvalidArgument, "is undefined");
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, StateTest,
                         ::testing::Values(std::make_pair("sgd", Maker<Sgd>(SgdOptions{})),
                                           std::make_pair("sgd_momentum",
                                                          Maker<Sgd>(MomentumSgd())),
                                           std::make_pair("adam", Maker<Adam>(AdamOptions{})),
                                           std::make_pair("adamw", Maker<Adam>(AdamWOptions())),
                                           std::make_pair("lars", Maker<Lars>(LarsOptions{})),
                                           std::make_pair("lamb", Maker<Lamb>(LambOptions{}))),
                         [](const auto& info) { return std::string(info.param.first); });

}  // namespace
}  // namespace paddle::optim
