// Sparse gradients under DDP (Note [Sparse exchange], paddle/parallel/reducer/sparse_exchange.h)
// on 1-4 ranks as threads over the native communicator: an Embedding(sparse = true) + Linear model
// ends with the same parameters as the same model with a dense embedding (dense buckets), for SGD
// with momentum, Adam and Adagrad; duplicates are merged into exact averages; the dense fallback
// is taken when it moves fewer bytes, and gives the same result.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/nn/embedding.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/layers.h"
#include "paddle/optim/adagrad.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/sgd.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/reducer/sparse_exchange.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using autograd::SparseRows;
using autograd::Variable;
using commtest::CommGroup;

constexpr int64_t kBatch = 4;  // samples per rank
constexpr int64_t kLen = 6;    // ids per sample
constexpr int64_t kDim = 8;
constexpr int kSteps = 5;
// Note the tolerance: the two paths sum the same float32 gradients in different orders (a ring
// allreduce of the table vs concatenation by rank then per-id sums), so results differ by a few
// ulps per step; 1e-5 absolute + relative on parameters of magnitude ~1 after 5 steps.
constexpr double kTol = 1e-5;

std::unique_ptr<CommGroup> MakeGroup(int world) {
  commtest::GroupOptions o;
  o.world_size = world;
  return CommGroup::Create(o).value();
}

class EmbeddingModel : public nn::Module {
 public:
  EmbeddingModel(int64_t rows, bool sparse) : Module("EmbeddingModel") {
    nn::Generator gen(42);
    emb_ = RegisterModule("emb", std::make_shared<nn::Embedding>(rows, kDim, &gen, sparse));
    fc_ = RegisterModule("fc", std::make_shared<nn::Linear>(kLen * kDim, 3, &gen));
  }
  absl::StatusOr<Variable> Forward(const Variable& ids) override {
    ASSIGN_OR_RETURN(Variable e, emb_->Forward(ids));
    ASSIGN_OR_RETURN(Variable flat, nn::functional::Reshape(e, {kBatch, kLen * kDim}));
    return fc_->Forward(flat);
  }

 private:
  std::shared_ptr<nn::Embedding> emb_;
  std::shared_ptr<nn::Linear> fc_;
};

enum class Ids {
  kPartition,  // rows split over ranks (every row touched each step) + rows 0, 1 on every rank
  kAll,        // every rank touches every row: sparse costs more than dense from 2 ranks on
  kRandom,     // a few of many rows, from (step, rank)
};

struct Config {
  Ids ids = Ids::kPartition;
  int64_t rows = 20;
  std::string optimizer;
};

Tensor BatchIds(const Config& c, int step, int rank, int world) {
  Tensor t = Tensor::Empty({kBatch, kLen}, DType::kInt64).value();
  int64_t* p = t.data<int64_t>();
  const int64_t n = kBatch * kLen;
  std::vector<int64_t> mine;
  for (int64_t r = c.ids == Ids::kPartition ? rank : 0; r < c.rows;
       r += c.ids == Ids::kPartition ? world : 1) {
    mine.push_back(r);
  }
  for (int64_t k = 0; k < n; ++k) {
    if (c.ids == Ids::kRandom) {
      p[k] = static_cast<int64_t>(Philox(step + 1, rank).WordAt(k) % c.rows);
    } else if (k >= n - 2) {
      p[k] = k - (n - 2);  // rows 0 and 1: on every rank, merged across ranks
    } else {
      p[k] = mine[(k + step) % mine.size()];
    }
  }
  return t;
}

Tensor Labels(int step, int rank) {
  Tensor y = Tensor::Empty({kBatch}, DType::kInt64).value();
  for (int64_t i = 0; i < kBatch; ++i) y.data<int64_t>()[i] = (i * 7 + step * 3 + rank) % 3;
  return y;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const std::string& name,
                                                                std::vector<Variable> params) {
  if (name == "sgd_momentum") {
    return optim::Sgd::Create(std::move(params), {.lr = 0.1, .momentum = 0.9, .exclude = nullptr});
  }
  if (name == "sgd") return optim::Sgd::Create(std::move(params), {.lr = 0.1, .exclude = nullptr});
  if (name == "adam")
    return optim::Adam::Create(std::move(params), {.lr = 0.01, .exclude = nullptr});
  if (name == "adagrad")
    return optim::Adagrad::Create(std::move(params), {.lr = 0.1, .exclude = nullptr});
  return absl::InvalidArgumentError(name);
}

struct Result {
  std::vector<std::vector<float>> params;  // [rank] flattened
  ReducerStats stats;                      // rank 0's
};

Result Train(CommGroup& group, const Config& c, bool sparse) {
  const int world = group.size();
  Result result;
  result.params.resize(world);
  std::vector<absl::Status> st = group.Run([&](int rank, Communicator& comm) -> absl::Status {
    auto model = std::make_shared<EmbeddingModel>(c.rows, sparse);
    ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> opt,
                     MakeOptimizer(c.optimizer, model->Parameters()));
    ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                     DistributedDataParallel::Create(model, &comm));
    for (int step = 0; step < kSteps; ++step) {
      opt->ZeroGrad();
      ASSIGN_OR_RETURN(Variable logits, ddp->Forward(Variable(BatchIds(c, step, rank, world))));
      ASSIGN_OR_RETURN(Variable loss,
                       nn::functional::SoftmaxCrossEntropy(logits, Labels(step, rank)));
      RETURN_IF_ERROR(ddp->Backward(loss));
      RETURN_IF_ERROR(opt->Step());
    }
    for (const Variable& p : model->Parameters()) {
      const float* d = p.data().data<float>();
      result.params[rank].insert(result.params[rank].end(), d, d + p.data().numel());
    }
    if (rank == 0) result.stats = ddp->reducer().stats();
    return absl::OkStatus();
  });
  EXPECT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  return result;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::abs(double{got[i]} - want[i]) > kTol * (1 + std::abs(want[i]))) {
      ADD_FAILURE() << "element " << i << ": sparse path " << got[i] << ", dense path " << want[i];
      ++bad;
    }
  }
}

void CheckSparseMatchesDense(int world, const Config& c, bool expect_fallback) {
  SCOPED_TRACE(absl::StrCat(world, " ranks, ", c.optimizer, ", ", c.rows, " rows, ids mode ",
                            static_cast<int>(c.ids)));
  std::unique_ptr<CommGroup> group = MakeGroup(world);
  const Result dense = Train(*group, c, false);
  const Result sparse = Train(*group, c, true);
  if (::testing::Test::HasFailure()) return;
  for (int r = 0; r < world; ++r) {
    // Every rank holds the same replica, bit for bit, on either path.
    ASSERT_EQ(sparse.params[r], sparse.params[0]) << "rank " << r;
    ASSERT_EQ(dense.params[r], dense.params[0]) << "rank " << r;
  }
  ExpectClose(sparse.params[0], dense.params[0]);
  // And training moved them: the comparison is not of two untouched models.
  std::vector<float> initial;
  for (const Variable& p : EmbeddingModel(c.rows, false).Parameters()) {
    initial.insert(initial.end(), p.data().data<float>(),
                   p.data().data<float>() + p.data().numel());
  }
  EXPECT_NE(sparse.params[0], initial);
  EXPECT_EQ(sparse.stats.sparse_dense_fallbacks > 0, expect_fallback);
  EXPECT_EQ(sparse.stats.sparse_bytes_sent > 0, world > 1);
  EXPECT_EQ(dense.stats.sparse_entries, 0);
  EXPECT_GT(sparse.stats.sparse_entries, 0);
}

TEST(SparseDdpTest, SparseEqualsDenseEveryOptimizerOneToFourRanks) {
  for (int world = 1; world <= 4; ++world) {
    for (const char* opt : {"sgd_momentum", "adam", "adagrad"}) {
      CheckSparseMatchesDense(world, {Ids::kPartition, 20, opt}, /*expect_fallback=*/false);
    }
  }
}

TEST(SparseDdpTest, DenseFallbackWhenCheaperGivesTheSameResult) {
  // 20 rows x 8: each rank's 20 coalesced entries cost 20 * (8 + 32) = 800 bytes; the dense
  // table 2 * 20 * 9 * 4 = 1440. One rank: sparse; two or more: 1600+ > 1440, dense.
  for (int world = 1; world <= 4; ++world) {
    for (const char* opt : {"sgd_momentum", "adam"}) {
      CheckSparseMatchesDense(world, {Ids::kAll, 20, opt}, /*expect_fallback=*/world > 1);
    }
  }
}

TEST(SparseDdpTest, FewRowsOfALargeTableLazyEqualsDenseForAdagradAndSgd) {
  // Untouched rows do not move under Adagrad or plain SGD, so lazy = dense here.
  for (int world : {2, 3}) {
    for (const char* opt : {"adagrad", "sgd"}) {
      CheckSparseMatchesDense(world, {Ids::kRandom, 1000, opt}, /*expect_fallback=*/false);
    }
  }
}

// ExchangeSparseGradients itself: with hi = rows - 1, rank r's gradient has ids {hi, r, hi} with
// rows (r + 1) * {1, 2}, (r + 1) * {10, 20}, (r + 1) * {100, 200}: after the exchange every rank
// holds the ids sorted and unique, each row the exact average over ranks. Small integers: every
// sum is exact, so the sparse and the dense way give the same bits. With 4 rows x 2 the dense
// table costs 2 * 4 * 3 * 4 = 96 bytes and the entries 16 each, so 4 ranks (7 entries) go dense.
TEST(SparseDdpTest, DuplicatesMergedIntoExactAverages) {
  int fallbacks = 0;
  for (int world = 1; world <= 4; ++world) {
    for (int64_t rows : {int64_t{100}, int64_t{4}}) {
      SCOPED_TRACE(absl::StrCat(world, " ranks, ", rows, " rows"));
      const int64_t hi = rows - 1;
      std::unique_ptr<CommGroup> group = MakeGroup(world);
      std::vector<SparseExchangeStats> stats(world);
      std::vector<absl::Status> st = group->Run([&](int rank, Communicator& comm) -> absl::Status {
        Variable table(Tensor::Zeros({rows, 2}, DType::kFloat32).value(), true, "table");
        table.set_sparse(true);
        SparseRows g{Tensor::Empty({3}, DType::kInt64).value(),
                     Tensor::Empty({3, 2}, DType::kFloat32).value(), rows};
        const int64_t ids[] = {hi, rank, hi};
        const float base[] = {1, 10, 100};
        for (int i = 0; i < 3; ++i) {
          g.ids.data<int64_t>()[i] = ids[i];
          g.rows.data<float>()[2 * i] = base[i] * (rank + 1);
          g.rows.data<float>()[2 * i + 1] = 2 * base[i] * (rank + 1);
        }
        RETURN_IF_ERROR(table.set_sparse_grad(g));
        std::vector<std::pair<std::string, Variable>> params{{"table", table}};
        ASSIGN_OR_RETURN(stats[rank], ExchangeSparseGradients(params, &comm, commtest::kGenerous));
        const SparseRows* out = table.sparse_grad();
        if (out == nullptr) return absl::InternalError("no gradient after the exchange");
        std::vector<int64_t> want_ids;
        for (int r = 0; r < world; ++r) want_ids.push_back(r);
        if (hi >= world) want_ids.push_back(hi);
        if (out->size() != static_cast<int64_t>(want_ids.size())) {
          return absl::InternalError(absl::StrCat("rank ", rank, ": ", out->size(), " ids"));
        }
        for (size_t k = 0; k < want_ids.size(); ++k) {
          const int64_t id = out->ids.data<int64_t>()[k];
          if (id != want_ids[k]) return absl::InternalError(absl::StrCat("id ", k, " = ", id));
          double sum = 0;  // row `id`'s first column, summed over ranks
          for (int r = 0; r < world; ++r) {
            if (id == hi) sum += 101.0 * (r + 1);
            if (id == r) sum += 10.0 * (r + 1);
          }
          const float want = static_cast<float>(sum) / static_cast<float>(world);
          const float got0 = out->rows.data<float>()[2 * k];
          const float got1 = out->rows.data<float>()[2 * k + 1];
          if (got0 != want || got1 != 2 * want) {
            return absl::InternalError(absl::StrCat("rank ", rank, " id ", id, ": got ", got0, ", ",
                                                    got1, ", want ", want, ", ", 2 * want));
          }
        }
        return absl::OkStatus();
      });
      ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
      int64_t entries = 0;
      for (int r = 0; r < world; ++r) entries += r == hi ? 1 : 2;
      const SparseExchangeChoice choice = ChooseSparseExchange(entries, rows, 2, 4, world);
      EXPECT_EQ(stats[0].dense_fallbacks, choice.dense ? 1 : 0);
      EXPECT_EQ(stats[0].entries, entries);
      fallbacks += choice.dense;
    }
  }
  EXPECT_EQ(fallbacks, 1);  // 4 ranks, 4 rows
}

TEST(SparseDdpTest, ChoiceRuleAndTheCtrTableFigures) {
  // Note [Sparse or dense]: E * (8 + dim * b) <= 2 * num_rows * (dim + 1) * b.
  EXPECT_FALSE(ChooseSparseExchange(10, 20, 8, 4, 2).dense);  // 400 <= 1440
  EXPECT_FALSE(ChooseSparseExchange(36, 20, 8, 4, 2).dense);  // 1440 <= 1440
  EXPECT_TRUE(ChooseSparseExchange(37, 20, 8, 4, 2).dense);   // 1480 > 1440
  const SparseExchangeChoice one = ChooseSparseExchange(4096, 1000000, 16, 4, 1);
  EXPECT_EQ(one.sparse_bytes, 0);  // one rank sends nothing either way
  EXPECT_EQ(one.dense_bytes, 0);
  // The 1e6 x 16 float32 table with 4096 lookups per rank (all distinct: the worst case).
  for (int world : {2, 4, 8}) {
    const SparseExchangeChoice c = ChooseSparseExchange(4096 * world, 1000000, 16, 4, world);
    EXPECT_FALSE(c.dense);
    std::printf(
        "table 1e6 x 16 fp32, 4096 ids/rank, %d ranks: sparse %lld bytes/rank/step, "
        "dense allreduce %lld bytes/rank/step (%.0fx)\n",
        world, static_cast<long long>(c.sparse_bytes), static_cast<long long>(c.dense_bytes),
        static_cast<double>(c.dense_bytes) / static_cast<double>(c.sparse_bytes));
  }
  EXPECT_TRUE(ChooseSparseExchange(4096 * 4, 1000, 16, 4, 4).dense);
}

TEST(SparseDdpTest, SparseParameterOffTheCpuOrNot2DIsRejected) {
  std::unique_ptr<CommGroup> group = MakeGroup(1);
  Variable v(Tensor::Zeros({4}, DType::kFloat32).value(), true, "v");
  v.set_sparse(true);
  absl::StatusOr<std::unique_ptr<Reducer>> r = Reducer::Create({{"v", v}}, &group->comm(0), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sparse parameter 'v'"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace paddle
