// The autograd engine on hand-made operations: gradient routing and summing, accumulation across
// backward passes, the order and count of gradient-ready hooks, no-grad scopes, gradients as
// views, errors, and the version check of saved tensors.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/core/autograd/engine.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/autograd/variable.h"

namespace paddle::autograd {
namespace {

Tensor Vec(std::vector<float> values) {
  Tensor t = *Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kFloat32);
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Records `name` into `order` when a node with that name runs.
Variable Record(Tensor out, std::string name, std::vector<Edge> edges,
                FunctionNode::BackwardFn fn) {
  bool any = false;
  for (const Edge& e : edges) any = any || e.valid();
  if (!any || !GradMode::IsEnabled()) return Variable(std::move(out));
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(fn));
  node->set_next_edges(std::move(edges));
  return Variable::FromNode(std::move(out), node);
}

// y = a * b elementwise.
Variable Mul(const Variable& a, const Variable& b) {
  Tensor out = *Tensor::Empty(a.shape(), DType::kFloat32);
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.data<float>()[i] = a.data().data<float>()[i] * b.data().data<float>()[i];
  }
  Tensor av = a.data(), bv = b.data();
  return Record(out, "mul", {a.GradientEdge(), b.GradientEdge()},
                [av, bv](const Tensor& g) -> absl::StatusOr<std::vector<Tensor>> {
                  Tensor da = *Tensor::Empty(av.shape(), DType::kFloat32);
                  Tensor db = *Tensor::Empty(bv.shape(), DType::kFloat32);
                  for (int64_t i = 0; i < g.numel(); ++i) {
                    da.data<float>()[i] = g.data<float>()[i] * bv.data<float>()[i];
                    db.data<float>()[i] = g.data<float>()[i] * av.data<float>()[i];
                  }
                  return std::vector<Tensor>{da, db};
                });
}

// Sum of all elements, a scalar.
Variable Sum(const Variable& a) {
  Tensor out = *Tensor::Empty({}, DType::kFloat32);
  float s = 0;
  for (int64_t i = 0; i < a.data().numel(); ++i) s += a.data().data<float>()[i];
  *out.data<float>() = s;
  Shape shape = a.shape();
  return Record(out, "sum", {a.GradientEdge()},
                [shape](const Tensor& g) -> absl::StatusOr<std::vector<Tensor>> {
                  Tensor d = *Tensor::Empty(shape, DType::kFloat32);
                  for (int64_t i = 0; i < d.numel(); ++i) d.data<float>()[i] = *g.data<float>();
                  return std::vector<Tensor>{d};
                });
}

TEST(AutogradTest, ProductRuleAndSharedInputsSum) {
  Variable x(Vec({1, 2, 3}), /*requires_grad=*/true, "x");
  Variable w(Vec({4, 5, 6}), true, "w");
  // loss = sum(x * w) + sum(x * x): dx = w + 2x, dw = x.
  Variable loss_a = Sum(Mul(x, w));
  Variable loss_b = Sum(Mul(x, x));
  Variable both = Sum(Mul(Variable(Vec({1, 1})), Variable(Vec({0, 0}))));  // no grad
  EXPECT_FALSE(both.requires_grad());
  ASSERT_TRUE(loss_a.Backward().ok());
  ASSERT_TRUE(loss_b.Backward().ok());
  EXPECT_THAT(Values(x.grad()), ::testing::ElementsAre(6, 9, 12));
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(1, 2, 3));
}

TEST(AutogradTest, GradientsAccumulateUntilZeroed) {
  Variable w(Vec({1, 2}), true, "w");
  Variable c(Vec({3, 4}));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Sum(Mul(w, c)).Backward().ok());
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(9, 12));
  const void* memory = w.grad().data();
  w.ZeroGrad();
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(0, 0));
  ASSERT_TRUE(Sum(Mul(w, c)).Backward().ok());
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(3, 4));
  EXPECT_EQ(w.grad().data(), memory);  // zeroed and refilled in place
}

// Note [Freed graphs]: the first pass frees what nodes saved; a second one names the node.
TEST(AutogradTest, SecondBackwardThroughAFreedGraphFailsNamingTheNode) {
  Variable w(Vec({1, 2}), true, "w");
  Variable c(Vec({3, 4}));
  Variable loss = Sum(Mul(w, c));
  ASSERT_TRUE(loss.Backward().ok());
  absl::Status again = loss.Backward();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_THAT(std::string(again.message()), ::testing::HasSubstr("backward of sum"));
  EXPECT_THAT(std::string(again.message()), ::testing::HasSubstr("retain_graph"));
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(3, 4));  // not accumulated twice
}

TEST(AutogradTest, RetainGraphKeepsTheGraphForAnotherPass) {
  Variable w(Vec({1, 2}), true, "w");
  Variable loss = Sum(Mul(w, Variable(Vec({3, 4}))));
  ASSERT_TRUE(loss.Backward(/*retain_graph=*/true).ok());
  ASSERT_TRUE(loss.Backward(/*retain_graph=*/true).ok());
  ASSERT_TRUE(loss.Backward().ok());  // the last one frees
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(9, 12));
  EXPECT_EQ(loss.Backward().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AutogradTest, BackwardReleasesSavedStateAsItGoes) {
  Variable w(Vec({1}), true, "w");
  auto saved = std::make_shared<int>(7);  // stands for a tensor a node saved
  std::weak_ptr<int> watch = saved;
  Variable y = Record(Vec({2}), "keeps_state", {w.GradientEdge()},
                      [saved](const Tensor&) -> absl::StatusOr<std::vector<Tensor>> {
                        return std::vector<Tensor>{Vec({static_cast<float>(*saved)})};
                      });
  saved.reset();
  ASSERT_FALSE(watch.expired());  // the graph holds it while y lives
  ASSERT_TRUE(Sum(y).Backward().ok());
  EXPECT_TRUE(watch.expired());  // freed by the pass, though y still holds the node
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(7));
}

TEST(AutogradTest, HooksFireOncePerBackwardInReverseForwardOrder) {
  // A chain: h1 = x*w1, h2 = h1*w2, h3 = h2*w3, loss = sum(h3); w1 is also used at the end, so
  // its gradient is complete only after both uses.
  Variable x(Vec({1, 2}));
  Variable w1(Vec({1, 1}), true, "w1"), w2(Vec({2, 2}), true, "w2"), w3(Vec({3, 3}), true, "w3");
  std::vector<std::string> ready;
  for (Variable* w : {&w1, &w2, &w3}) {
    w->AddGradReadyHook([&ready](const Variable& v) {
      ready.push_back(v.name());
      EXPECT_TRUE(v.grad().defined());
    });
  }
  Variable h = Mul(Mul(Mul(x, w1), w2), w3);
  Variable loss = Sum(Mul(h, w1));
  ASSERT_TRUE(loss.Backward().ok());
  EXPECT_THAT(ready, ::testing::ElementsAre("w3", "w2", "w1"));
  // d/dw1 of sum(x*w1*w2*w3*w1) = 2*x*w1*w2*w3.
  EXPECT_THAT(Values(w1.grad()), ::testing::ElementsAre(12, 24));
}

TEST(AutogradTest, RemovedHookDoesNotFire) {
  Variable w(Vec({1}), true, "w");
  int calls = 0;
  int handle = w.AddGradReadyHook([&calls](const Variable&) { ++calls; });
  ASSERT_TRUE(Sum(Mul(w, w)).Backward().ok());
  w.RemoveGradReadyHook(handle);
  ASSERT_TRUE(Sum(Mul(w, w)).Backward().ok());
  EXPECT_EQ(calls, 1);
}

TEST(AutogradTest, NoGradGuardRecordsNothing) {
  Variable w(Vec({1, 2}), true, "w");
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::IsEnabled());
    Variable y = Sum(Mul(w, w));
    EXPECT_FALSE(y.requires_grad());
    absl::Status s = y.Backward();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  EXPECT_TRUE(GradMode::IsEnabled());
}

TEST(AutogradTest, GradientViewIsWrittenInPlace) {
  Tensor bucket = *Tensor::Zeros({5}, DType::kFloat32);
  Variable w(Vec({1, 2}), true, "w");
  ASSERT_TRUE(w.set_grad(*bucket.Slice(0, 2, 4)).ok());
  ASSERT_TRUE(Sum(Mul(w, Variable(Vec({7, 8})))).Backward().ok());
  EXPECT_THAT(Values(bucket), ::testing::ElementsAre(0, 0, 7, 8, 0));
  absl::Status bad = w.set_grad(*Tensor::Zeros({3}, DType::kFloat32));
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("set_grad of 'w'"));
}

TEST(AutogradTest, ErrorsNameTheNodeAndTheRoot) {
  Variable w(Vec({1, 2}), true, "w");
  Variable not_scalar = Mul(w, w);
  absl::Status s = not_scalar.Backward();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("one-element root"));

  Variable failing = Record(*Tensor::Zeros({}, DType::kFloat32), "exploding", {w.GradientEdge()},
                            [](const Tensor&) -> absl::StatusOr<std::vector<Tensor>> {
                              return absl::InternalError("kaboom");
                            });
  s = failing.Backward();
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("backward of exploding"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("kaboom"));

  // A gradient of the wrong shape for a parameter names the parameter.
  Variable wrong = Record(*Tensor::Zeros({}, DType::kFloat32), "wrong_shape", {w.GradientEdge()},
                          [](const Tensor&) -> absl::StatusOr<std::vector<Tensor>> {
                            return std::vector<Tensor>{*Tensor::Zeros({3}, DType::kFloat32)};
                          });
  s = wrong.Backward();
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("gradient of parameter 'w'"));
}

// Note [Saved tensor versions]: y = a * b through RecordOperation, declaring both inputs saved;
// z = a + b declaring nothing (its backward needs no values).
Variable SavedMul(const Variable& a, const Variable& b) {
  Tensor out = *Tensor::Empty(a.shape(), DType::kFloat32);
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.data<float>()[i] = a.data().data<float>()[i] * b.data().data<float>()[i];
  }
  Tensor av = a.data(), bv = b.data();
  return RecordOperation(out, "mul", {a.GradientEdge(), b.GradientEdge()},
                         {{"input a", av}, {"input b", bv}},
                         [av, bv](const Tensor& g) -> absl::StatusOr<std::vector<Tensor>> {
                           Tensor da = *Tensor::Empty(av.shape(), DType::kFloat32);
                           Tensor db = *Tensor::Empty(bv.shape(), DType::kFloat32);
                           for (int64_t i = 0; i < g.numel(); ++i) {
                             da.data<float>()[i] = g.data<float>()[i] * bv.data<float>()[i];
                             db.data<float>()[i] = g.data<float>()[i] * av.data<float>()[i];
                           }
                           return std::vector<Tensor>{da, db};
                         });
}

Variable Add(const Variable& a, const Variable& b) {
  Tensor out = *Tensor::Empty(a.shape(), DType::kFloat32);
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.data<float>()[i] = a.data().data<float>()[i] + b.data().data<float>()[i];
  }
  return RecordOperation(out, "add", {a.GradientEdge(), b.GradientEdge()},
                         [](const Tensor& g) -> absl::StatusOr<std::vector<Tensor>> {
                           return std::vector<Tensor>{g, g};
                         });
}

TEST(AutogradTest, VersionCountersAreSharedByViewsAndBumpedByCopyFrom) {
  Tensor t = Vec({1, 2, 3, 4});
  EXPECT_EQ(t.version(), 0u);
  Tensor view = *t.Slice(0, 1, 3);
  ASSERT_TRUE(view.CopyFrom(Vec({9, 9})).ok());
  EXPECT_EQ(t.version(), 1u);  // a write through a view counts for the whole storage
  EXPECT_EQ(view.version(), 1u);
  Tensor copy = *t.Clone();  // new storage, new counter
  EXPECT_EQ(copy.version(), 0u);
  copy.BumpVersion();
  EXPECT_EQ(t.version(), 1u);
  EXPECT_EQ(Tensor().version(), 0u);
}

TEST(AutogradTest, InPlaceEditOfASavedInputFailsBackwardNamingNodeTensorAndVersions) {
  Variable w(Vec({1, 2, 3}), true, "w");
  Tensor c = Vec({3, 4, 5});
  Variable loss = Sum(SavedMul(w, Variable(c)));
  ASSERT_TRUE(c.Slice(0, 2, 3)->CopyFrom(Vec({50})).ok());  // through a view of the storage
  absl::Status s = loss.Backward();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  const std::string m(s.message());
  EXPECT_THAT(m, ::testing::HasSubstr("backward of mul (node #"));
  EXPECT_THAT(m, ::testing::HasSubstr("its input b (float32[3] on cpu)"));
  EXPECT_THAT(m, ::testing::HasSubstr("it is at version 1, mul saved it at version 0"));
  EXPECT_FALSE(w.grad().defined());  // nothing accumulated from the stale values

  // The same graph shape without the edit works, and gives the product rule's gradient.
  Variable fresh(Vec({3, 4, 5}));
  ASSERT_TRUE(Sum(SavedMul(w, fresh)).Backward().ok());
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(3, 4, 5));
}

TEST(AutogradTest, InPlaceEditOfAnInputNothingSavedIsFine) {
  // PyTorch's rule: add keeps no values, so changing its input afterwards changes nothing.
  Variable w(Vec({1, 2}), true, "w");
  Tensor c = Vec({3, 4});
  Variable loss = Sum(Add(w, Variable(c)));
  ASSERT_TRUE(c.CopyFrom(Vec({7, 7})).ok());
  ASSERT_TRUE(loss.Backward().ok());
  EXPECT_THAT(Values(w.grad()), ::testing::ElementsAre(1, 1));
  // Under no-grad nothing is recorded, so nothing is checked either.
  {
    NoGradGuard no_grad;
    Variable y = SavedMul(w, Variable(c));
    EXPECT_FALSE(y.requires_grad());
  }
}

TEST(AutogradTest, EditOfTheParameterItselfBetweenForwardAndBackwardFails) {
  // As an optimizer step would: the parameter's own storage is bumped after the forward pass.
  Variable w(Vec({1, 2}), true, "w");
  Variable loss = Sum(SavedMul(w, Variable(Vec({3, 4}))));
  w.data().BumpVersion();
  absl::Status s = loss.Backward();
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("its input a (float32[2] on cpu)"));
  // The saved tensors are dropped with the graph (Note [Freed graphs] still applies after).
  auto node = std::dynamic_pointer_cast<FunctionNode>(loss.grad_fn()->next_edges()[0].node);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->saved().size(), 2u);
  node->ReleaseSavedState();
  EXPECT_TRUE(node->saved().empty());
}

}  // namespace
}  // namespace paddle::autograd
