// Tests of nn::Embedding (paddle/nn/embedding.h) and SparseRows (paddle/core/autograd/
// sparse_rows.h): the gather, the dense and sparse backward giving the same gradient, sparse
// accumulation over passes, coalescing, and bad ids named with their position and the row count.
#include "paddle/nn/embedding.h"

#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"

namespace paddle::nn {
namespace {

using autograd::SparseRows;

Tensor Ids(const Shape& shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::Empty(shape, DType::kInt64).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

Tensor Floats(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = values[i];
  return t;
}

// sum(out * weights): a loss whose gradient with respect to `out` is `weights`.
absl::StatusOr<Variable> WeightedSum(const Variable& out, const Tensor& weights) {
  ASSIGN_OR_RETURN(Variable prod, functional::Mul(out, Variable(weights)));
  ASSIGN_OR_RETURN(Variable flat, functional::Reshape(prod, {1, prod.data().numel()}));
  Tensor ones = Tensor::Empty({1, prod.data().numel()}, DType::kFloat32).value();
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1.0f;
  Tensor zero = Tensor::Zeros({1}, DType::kFloat32).value();
  return functional::Linear(flat, Variable(ones), Variable(zero));
}

TEST(EmbeddingTest, ForwardGathersRows) {
  Generator gen(7);
  Embedding emb(5, 3, &gen);
  EXPECT_EQ(emb.weight().shape(), (Shape{5, 3}));
  EXPECT_FALSE(emb.weight().sparse());
  absl::StatusOr<Variable> out = emb.Forward(Variable(Ids({2, 2}, {4, 0, 4, 2})));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (Shape{2, 2, 3}));
  const float* w = emb.weight().data().data<float>();
  const float* y = out->data().data<float>();
  const int64_t ids[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(y[i * 3 + j], w[ids[i] * 3 + j]);
  }
}

TEST(EmbeddingTest, InitIsStandardNormalAndSeeded) {
  Generator a(11), b(11);
  Embedding e1(200, 50, &a), e2(200, 50, &b, /*sparse=*/true);
  const Tensor& w = e1.weight().data();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    sum += w.data<float>()[i];
    sq += w.data<float>()[i] * w.data<float>()[i];
    ASSERT_EQ(w.data<float>()[i], e2.weight().data().data<float>()[i]);
  }
  const double mean = sum / w.numel();
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(sq / w.numel() - mean * mean, 1.0, 0.05);
}

TEST(EmbeddingTest, BadIdsNameIdPositionAndRows) {
  Generator gen(1);
  auto emb = std::make_shared<Embedding>(10, 2, &gen, /*sparse=*/true);
  for (int64_t bad : {int64_t{10}, int64_t{-1}}) {
    absl::StatusOr<Variable> out = emb->Forward(Variable(Ids({4}, {1, 2, 9, bad})));
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(out.status().message());
    EXPECT_NE(msg.find(absl::StrCat("= ", bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Embedding 'weight' [10, 2]"), std::string::npos) << msg;
  }
  absl::StatusOr<Variable> floats = emb->Forward(Variable(Floats({1}, {1.0f})));
  ASSERT_FALSE(floats.ok());
  EXPECT_NE(floats.status().message().find("int64"), std::string::npos) << floats.status();
}

TEST(EmbeddingTest, SparseBackwardEqualsDenseBackward) {
  Generator g1(3), g2(3);
  Embedding dense(6, 4, &g1, false), sparse(6, 4, &g2, true);
  const Tensor ids = Ids({2, 3}, {5, 1, 5, 0, 5, 1});
  Tensor weights = Tensor::Empty({2, 3, 4}, DType::kFloat32).value();
  for (int64_t i = 0; i < weights.numel(); ++i) weights.data<float>()[i] = 0.25f * (i % 7) - 0.5f;
  for (Embedding* e : {&dense, &sparse}) {
    Variable out = e->Forward(Variable(ids)).value();
    Variable loss = WeightedSum(out, weights).value();
    ASSERT_TRUE(loss.Backward().ok());
  }
  ASSERT_TRUE(dense.weight().grad().defined());
  EXPECT_FALSE(sparse.weight().grad().defined());
  const SparseRows* g = sparse.weight().sparse_grad();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->size(), 6);  // one entry per lookup, duplicates kept until coalesced
  EXPECT_EQ(g->num_rows, 6);
  Tensor as_dense = autograd::SparseRowsToDense(*g).value();
  for (int64_t i = 0; i < as_dense.numel(); ++i) {
    EXPECT_EQ(as_dense.data<float>()[i], dense.weight().grad().data<float>()[i]) << i;
  }
  // Rows never looked up (2, 3, 4) have zero gradient.
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(as_dense.data<float>()[3 * 4 + j], 0.0f);
  // Coalesced: ids 0, 1, 5 with the duplicates summed.
  SparseRows c = autograd::Coalesce(*g).value();
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.ids.data<int64_t>()[0], 0);
  EXPECT_EQ(c.ids.data<int64_t>()[1], 1);
  EXPECT_EQ(c.ids.data<int64_t>()[2], 5);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(c.rows.data<float>()[2 * 4 + j], as_dense.data<float>()[5 * 4 + j]);
  }
}

TEST(EmbeddingTest, SparseGradientsAccumulateUntilZeroGrad) {
  Generator gen(5);
  Embedding emb(4, 2, &gen, true);
  Tensor w = Floats({2, 2}, {1, 2, 3, 4});
  for (int pass = 0; pass < 2; ++pass) {
    Variable out = emb.Forward(Variable(Ids({2}, {3, 1}))).value();
    ASSERT_TRUE(WeightedSum(out, w).value().Backward().ok());
  }
  const SparseRows* g = emb.weight().sparse_grad();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->size(), 4);
  Tensor d = autograd::SparseRowsToDense(*g).value();
  EXPECT_EQ(d.data<float>()[3 * 2 + 0], 2.0f);
  EXPECT_EQ(d.data<float>()[3 * 2 + 1], 4.0f);
  EXPECT_EQ(d.data<float>()[1 * 2 + 1], 8.0f);
  emb.ZeroGrad();
  EXPECT_EQ(emb.weight().sparse_grad(), nullptr);
}

TEST(SparseRowsTest, ChecksNameWhatIsWrong) {
  Tensor param = Tensor::Zeros({5, 2}, DType::kFloat32).value();
  SparseRows g{Ids({3}, {0, 7, 1}), Tensor::Zeros({3, 2}, DType::kFloat32).value(), 5};
  absl::Status s = autograd::CheckSparseRows(g, param, "t");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 7 at position 1 is outside [0, 5)"), std::string::npos) << s;
  g.ids = Ids({3}, {0, 4, 1});
  EXPECT_TRUE(autograd::CheckSparseRows(g, param, "t").ok());
  g.rows = Tensor::Zeros({3, 3}, DType::kFloat32).value();
  s = autograd::CheckSparseRows(g, param, "t");
  EXPECT_NE(s.message().find("[3, 2]"), std::string::npos) << s;
  g.rows = Tensor::Zeros({3, 2}, DType::kFloat32).value();
  g.num_rows = 6;
  EXPECT_FALSE(autograd::CheckSparseRows(g, param, "t").ok());

  autograd::Variable v(param, true, "table");
  v.set_sparse(true);
  g.num_rows = 5;
  g.ids = Ids({3}, {0, -2, 1});
  s = v.set_sparse_grad(g);
  EXPECT_NE(s.message().find("'table'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("id -2 at position 1"), std::string::npos) << s;
  EXPECT_EQ(v.sparse_grad(), nullptr);
}

TEST(SparseRowsTest, CoalesceEmptyAndConcat) {
  Tensor param = Tensor::Zeros({3, 2}, DType::kFloat64).value();
  SparseRows empty = autograd::EmptySparseRows(param).value();
  EXPECT_EQ(empty.size(), 0);
  SparseRows c = autograd::Coalesce(empty).value();
  EXPECT_EQ(c.size(), 0);
  EXPECT_EQ(c.dim(), 2);
  SparseRows a{Ids({1}, {2}), Tensor::Zeros({1, 2}, DType::kFloat64).value(), 3};
  a.rows.data<double>()[0] = 1.5;
  SparseRows ab = autograd::ConcatSparseRows(empty, a).value();
  ab = autograd::ConcatSparseRows(ab, a).value();
  SparseRows m = autograd::Coalesce(ab).value();
  ASSERT_EQ(m.size(), 1);
  EXPECT_EQ(m.rows.data<double>()[0], 3.0);
  SparseRows other{Ids({1}, {0}), Tensor::Zeros({1, 3}, DType::kFloat64).value(), 3};
  EXPECT_FALSE(autograd::ConcatSparseRows(a, other).ok());
}

}  // namespace
}  // namespace paddle::nn
