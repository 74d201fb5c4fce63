// Tests of lazy sparse updates (Note [Lazy sparse updates] in paddle/optim/optimizer.h): SGD with
// momentum (and Nesterov, weight decay), Adam and Adagrad updating only the touched rows, against
// the dense rule run on the whole table with the untouched rows' value and state put back after
// each step (which is what "lazy" means); lazy = dense where the rule leaves a zero-gradient row
// alone; duplicates summed; errors.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/philox.h"
#include "paddle/optim/adagrad.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/sgd.h"

namespace paddle::optim {
namespace {

using autograd::SparseRows;
using autograd::Variable;

constexpr int64_t kRows = 40;
constexpr int64_t kDim = 6;

// Uniform in [0, 1) from word i of Philox stream (seed, stream).
double PhiloxUniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return Philox(seed, stream).WordAt(i) / 4294967296.0;
}

float Rand(uint64_t seed, uint64_t i) {
  return static_cast<float>(PhiloxUniform(seed, 0, i)) * 2.0f - 1.0f;
}

Tensor Table(uint64_t seed) {
  Tensor t = Tensor::Empty({kRows, kDim}, DType::kFloat32).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = Rand(seed, i);
  return t;
}

// Step `step`'s gradient: `n` lookups with duplicates, ids from (seed, step) in [0, range).
SparseRows Grad(uint64_t seed, int step, int64_t n, int64_t range) {
  SparseRows g;
  g.num_rows = kRows;
  g.ids = Tensor::Empty({n}, DType::kInt64).value();
  g.rows = Tensor::Empty({n, kDim}, DType::kFloat32).value();
  for (int64_t i = 0; i < n; ++i) {
    g.ids.data<int64_t>()[i] =
        static_cast<int64_t>(PhiloxUniform(seed + 1, step, i) * static_cast<double>(range)) % range;
  }
  if (n > 2) g.ids.data<int64_t>()[n - 1] = g.ids.data<int64_t>()[0];  // a duplicate for sure
  for (int64_t i = 0; i < n * kDim; ++i) g.rows.data<float>()[i] = Rand(seed + 2 + step, i);
  return g;
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>;

struct Case {
  const char* name;
  Factory make;
  bool lazy_equals_dense;  // a zero-gradient row does not move under the dense rule
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back(
      {"sgd_momentum",
       [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
         return Sgd::Create(std::move(p), {.lr = 0.1, .momentum = 0.9, .exclude = nullptr}).value();
       },
       false});
  cases.push_back({"sgd_nesterov_wd",
                   [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                     return Sgd::Create(std::move(p), {.lr = 0.1,
                                                       .momentum = 0.9,
                                                       .nesterov = true,
                                                       .weight_decay = 0.01,
                                                       .exclude = nullptr})
                         .value();
                   },
                   false});
  cases.push_back({"sgd_plain",
                   [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                     return Sgd::Create(std::move(p), {.lr = 0.1, .exclude = nullptr}).value();
                   },
                   true});
  cases.push_back({"adam",
                   [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                     return Adam::Create(std::move(p), {.lr = 0.01, .exclude = nullptr}).value();
                   },
                   false});
  cases.push_back({"adamw",
                   [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                     return Adam::Create(std::move(p), AdamWOptions()).value();
                   },
                   false});
  cases.push_back({"adagrad",
                   [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                     return Adagrad::Create(std::move(p), {.lr = 0.1,
                                                           .lr_decay = 0.01,
                                                           .initial_accumulator_value = 0.1,
                                                           .exclude = nullptr})
                         .value();
                   },
                   true});
  return cases;
}

std::vector<float> Copy(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Rows `touched` (bool per row) of value and slots kept from the step, the others restored.
void RestoreUntouched(const std::vector<bool>& touched, const std::vector<float>& before,
                      const Tensor& t) {
  for (int64_t r = 0; r < kRows; ++r) {
    if (touched[r]) continue;
    std::memcpy(t.data<float>() + r * kDim, before.data() + r * kDim, sizeof(float) * kDim);
  }
}

TEST(SparseOptimTest, LazyUpdateIsTheDenseRuleOnTouchedRowsOnly) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Variable sparse(Table(1), true, "emb");
    sparse.set_sparse(true);
    Variable dense(Table(1), true, "emb");
    Variable plain(Table(1), true, "emb");  // dense rule, nothing restored
    std::unique_ptr<Optimizer> so = c.make({sparse});
    std::unique_ptr<Optimizer> dop = c.make({dense});
    std::unique_ptr<Optimizer> po = c.make({plain});
    for (int step = 0; step < 8; ++step) {
      // Ids in the first 30 rows only: rows 30..39 are never touched; others come and go.
      const SparseRows g = Grad(7, step, 12, 30);
      ASSERT_TRUE(sparse.set_sparse_grad(g).ok());
      const Tensor dg = autograd::SparseRowsToDense(g).value();
      ASSERT_TRUE(dense.set_grad(dg).ok());
      ASSERT_TRUE(plain.set_grad(autograd::SparseRowsToDense(g).value()).ok());
      std::vector<bool> touched(kRows, false);
      for (int64_t i = 0; i < g.size(); ++i) touched[g.ids.data<int64_t>()[i]] = true;
      const std::vector<float> value_before = Copy(dense.data());
      std::vector<std::vector<float>> slots_before;
      for (size_t s = 0; s < dop->slot_names().size(); ++s) {
        slots_before.push_back(Copy(dop->state(0, static_cast<int>(s))));
      }
      ASSERT_TRUE(so->Step().ok());
      ASSERT_TRUE(dop->Step().ok());
      ASSERT_TRUE(po->Step().ok());
      RestoreUntouched(touched, value_before, dense.data());
      for (size_t s = 0; s < slots_before.size(); ++s) {
        RestoreUntouched(touched, slots_before[s], dop->state(0, static_cast<int>(s)));
      }
      // Same kernel on the same numbers: bit-identical.
      ASSERT_EQ(Copy(sparse.data()), Copy(dense.data())) << "step " << step;
      for (size_t s = 0; s < slots_before.size(); ++s) {
        ASSERT_EQ(Copy(so->state(0, static_cast<int>(s))), Copy(dop->state(0, static_cast<int>(s))))
            << "slot " << dop->slot_names()[s] << " step " << step;
      }
      so->ZeroGrad();
      EXPECT_EQ(sparse.sparse_grad(), nullptr);
    }
    EXPECT_EQ(so->param_step(0), 8);
    // Never-touched rows kept their initial values exactly.
    const std::vector<float> init = Copy(Table(1));
    const std::vector<float> now = Copy(sparse.data());
    for (int64_t i = 30 * kDim; i < kRows * kDim; ++i) ASSERT_EQ(now[i], init[i]);
    // Where a zero gradient moves nothing, lazy is the plain dense rule.
    if (c.lazy_equals_dense) {
      EXPECT_EQ(Copy(sparse.data()), Copy(plain.data()));
    } else {
      EXPECT_NE(Copy(sparse.data()), Copy(plain.data()));
    }
  }
}

TEST(SparseOptimTest, EmptyGradientCountsAStepButMovesNothing) {
  Variable v(Table(2), true, "emb");
  v.set_sparse(true);
  auto opt = Adam::Create({v}, {}).value();
  ASSERT_TRUE(v.set_sparse_grad(autograd::EmptySparseRows(v.data()).value()).ok());
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_EQ(opt->param_step(0), 1);
  EXPECT_EQ(Copy(v.data()), Copy(Table(2)));
  opt->ZeroGrad();
  ASSERT_TRUE(opt->Step().ok());  // no gradient at all: skipped
  EXPECT_EQ(opt->param_step(0), 1);
}

TEST(SparseOptimTest, UnsupportedOptimizerAndMixedGradientsFailBeforeAnyUpdate) {
  Variable dense(Table(3), true, "fc");
  Variable emb(Table(4), true, "emb");
  emb.set_sparse(true);
  auto lars = Lars::Create({dense, emb}, {}).value();
  ASSERT_TRUE(dense.set_grad(Table(5)).ok());
  ASSERT_TRUE(emb.set_sparse_grad(Grad(1, 0, 5, kRows)).ok());
  absl::Status s = lars->Step();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
  EXPECT_EQ(Copy(dense.data()), Copy(Table(3)));  // all or nothing

  auto sgd = Sgd::Create({dense, emb}, {}).value();
  ASSERT_TRUE(emb.set_grad(Table(6)).ok());
  s = sgd->Step();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("both a dense and a sparse"), std::string::npos) << s;
  EXPECT_EQ(Copy(dense.data()), Copy(Table(3)));
}

TEST(SparseOptimTest, AdagradMatchesTorchFormula) {
  // One element by hand: sum0 = 0.1, g = 0.5, lr 0.1, step 1: sum = 0.35,
  // w -= 0.1 * 0.5 / (sqrt(0.35) + 1e-10).
  Variable v(Tensor::Zeros({1, 1}, DType::kFloat64).value(), true, "w");
  auto opt = Adagrad::Create({v}, {.lr = 0.1, .initial_accumulator_value = 0.1, .exclude = nullptr})
                 .value();
  Tensor g = Tensor::Empty({1, 1}, DType::kFloat64).value();
  g.data<double>()[0] = 0.5;
  ASSERT_TRUE(v.set_grad(g).ok());
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_DOUBLE_EQ(v.data().data<double>()[0], -0.1 * 0.5 / (std::sqrt(0.35) + 1e-10));
  EXPECT_DOUBLE_EQ(opt->state(0, 0).data<double>()[0], 0.35);
  EXPECT_FALSE(Adagrad::Create({v}, {.lr_decay = -1, .exclude = nullptr}).ok());
}

}  // namespace
}  // namespace paddle::optim
