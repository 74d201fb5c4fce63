// Tests of the distributed lookup table (paddle/parallel/sharded_embedding.h) on 1-4 ranks as
// threads over the native communicator: lookups and k training steps against a replicated single
// table fed the same gradient stream (SGD momentum and Adagrad, uneven splits, a rank with no
// ids, duplicates), shard checkpoints re-sharded 4 -> 2 -> 3 with optimizer state, and bad input
// failing on every rank with a clear message and leaving the communicator usable.
#include "paddle/parallel/sharded_embedding.h"

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CommGroup;

// Sums of up to 4 ranks' gradients taken in another order than the replicated table's, then a
// few optimizer steps: values stay within this of each other (they are of order 0.01-1).
constexpr float kTolerance = 2e-5f;

constexpr int64_t kRows = 3000;
constexpr int64_t kDim = 8;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double Uniform(uint64_t h) { return static_cast<double>(Mix(h) >> 11) * 0x1p-53; }

// Rank `rank`'s ids at `step`: a Zipf-like skew (u^4 puts most ids near 0, so ids repeat within
// and across ranks), counts uneven, and rank step % world sends none at all.
std::vector<int64_t> StepIds(int step, int rank, int world) {
  if (world > 1 && rank == step % world) return {};
  const int64_t n = 5 + 37 * rank + 11 * step;
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u = Uniform(step * 1000003ull + rank * 7919ull + i);
    ids[i] = std::min<int64_t>(kRows - 1, static_cast<int64_t>(kRows * u * u * u * u));
  }
  return ids;
}

// The gradient of position i: depends on the row it was given, so a wrong lookup shows up in the
// rows after training too.
float GradValue(float looked_up, int step, int rank, int64_t i, int64_t j) {
  return 0.5f * looked_up +
         static_cast<float>(Uniform((step * 31 + rank) * 100003ull + i * 17 + j)) - 0.5f;
}

ShardedEmbeddingOptions Options(RowOptimizerKind kind, GradReduction reduction) {
  ShardedEmbeddingOptions o;
  o.name = "emb";
  o.num_rows = kRows;
  o.dim = kDim;
  o.seed = 42;
  o.init_scale = 0.1f;
  o.reduction = reduction;
  o.optimizer.kind = kind;
  o.optimizer.lr = 0.1f;
  o.optimizer.momentum = kind == RowOptimizerKind::kSgd ? 0.9f : 0.0f;
  return o;
}

// The replicated single table: every row and its optimizer state in one place, updated lazily
// from all ranks' gradients, written independently of the sharded table's code.
class Replicated {
 public:
  explicit Replicated(const ShardedEmbeddingOptions& o)
      : o_(o), rows_(kRows * kDim), state_(kRows * kDim, 0.0f) {
    for (int64_t id = 0; id < kRows; ++id) {
      ShardedEmbedding::InitialRow(o.seed, id, o.init_scale,
                                   absl::MakeSpan(rows_.data() + id * kDim, kDim));
    }
  }
  const float* row(int64_t id) const { return rows_.data() + id * kDim; }
  // ids[r] and grads[r] ([n_r * dim]) of every rank.
  void Step(const std::vector<std::vector<int64_t>>& ids,
            const std::vector<std::vector<float>>& grads) {
    std::map<int64_t, std::vector<double>> sum;
    for (size_t r = 0; r < ids.size(); ++r) {
      for (size_t i = 0; i < ids[r].size(); ++i) {
        std::vector<double>& s = sum[ids[r][i]];
        s.resize(kDim, 0.0);
        for (int64_t j = 0; j < kDim; ++j) s[j] += grads[r][i * kDim + j];
      }
    }
    const double divisor = o_.reduction == GradReduction::kMeanOverRanks ? ids.size() : 1.0;
    for (const auto& [id, s] : sum) {
      for (int64_t j = 0; j < kDim; ++j) {
        const float g = static_cast<float>(s[j] / divisor);
        float& p = rows_[id * kDim + j];
        float& st = state_[id * kDim + j];
        if (o_.optimizer.kind == RowOptimizerKind::kSgd) {
          st = o_.optimizer.momentum * st + g;
          p -= o_.optimizer.lr * st;
        } else {
          st += g * g;
          p -= o_.optimizer.lr * g / (std::sqrt(st) + o_.optimizer.adagrad_eps);
        }
      }
    }
  }

 private:
  ShardedEmbeddingOptions o_;
  std::vector<float> rows_, state_;
};

std::unique_ptr<CommGroup> MakeGroup(int world) {
  commtest::GroupOptions o;
  o.world_size = world;
  return CommGroup::Create(o).value();
}

std::vector<std::unique_ptr<ShardedEmbedding>> MakeTables(CommGroup& group,
                                                          const ShardedEmbeddingOptions& o) {
  std::vector<std::unique_ptr<ShardedEmbedding>> t;
  for (int r = 0; r < group.size(); ++r)
    t.push_back(ShardedEmbedding::Create(&group.comm(r), o).value());
  return t;
}

// One training step on every rank: Lookup (checked against the replicated table), gradients from
// the looked-up rows, Backward; then the replicated table takes the same gradients.
void TrainStep(CommGroup& group, std::vector<std::unique_ptr<ShardedEmbedding>>& tables,
               Replicated& ref, int step) {
  const int world = group.size();
  std::vector<std::vector<int64_t>> ids(world);
  std::vector<std::vector<float>> grads(world);
  std::vector<absl::Status> st = group.Run([&](int rank, Communicator&) -> absl::Status {
    ids[rank] = StepIds(step, rank, world);
    const int64_t n = static_cast<int64_t>(ids[rank].size());
    ASSIGN_OR_RETURN(Tensor rows, tables[rank]->Lookup(ids[rank]));
    if (rows.shape() != Shape{n, kDim}) return absl::InternalError(rows.ToString());
    ASSIGN_OR_RETURN(Tensor grad, Tensor::Empty({n, kDim}, DType::kFloat32));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < kDim; ++j) {
        const float got = rows.data<float>()[i * kDim + j];
        const float want = ref.row(ids[rank][i])[j];
        if (std::abs(got - want) > kTolerance) {
          return absl::InternalError(absl::StrCat("step ", step, " lookup of id ", ids[rank][i],
                                                  " at ", i, " elem ", j, ": ", got, " vs ", want));
        }
        grad.data<float>()[i * kDim + j] = GradValue(want, step, rank, i, j);
      }
    }
    grads[rank].assign(grad.data<float>(), grad.data<float>() + n * kDim);
    return tables[rank]->Backward(ids[rank], grad);
  });
  ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  ref.Step(ids, grads);
}

// Every row of the table, read through each rank's own shard, against the replicated table.
void ExpectSameRows(std::vector<std::unique_ptr<ShardedEmbedding>>& tables, const Replicated& ref) {
  const int world = static_cast<int>(tables.size());
  int64_t worst_id = -1;
  float worst = 0;
  for (int64_t id = 0; id < kRows; ++id) {
    const int owner = ShardedEmbedding::OwnerOf(id, world, 42);
    std::vector<float> row = tables[owner]->LocalRow(id).value();
    for (int64_t j = 0; j < kDim; ++j) {
      const float d = std::abs(row[j] - ref.row(id)[j]);
      if (d > worst) worst = d, worst_id = id;
    }
  }
  EXPECT_LE(worst, kTolerance) << "worst row " << worst_id;
}

struct Case {
  int world;
  RowOptimizerKind kind;
  GradReduction reduction;
};

class ShardedVsReplicatedTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedVsReplicatedTest, SameLookupsAndRowsAfterTraining) {
  const Case c = GetParam();
  std::unique_ptr<CommGroup> group = MakeGroup(c.world);
  const ShardedEmbeddingOptions o = Options(c.kind, c.reduction);
  auto tables = MakeTables(*group, o);
  Replicated ref(o);
  constexpr int kSteps = 6;
  for (int step = 0; step < kSteps; ++step) {
    TrainStep(*group, tables, ref, step);
    if (HasFatalFailure()) return;
  }
  ExpectSameRows(tables, ref);
  // Rows are spread over the ranks, and only trained rows are stored.
  int64_t stored = 0;
  for (auto& t : tables) {
    stored += t->materialized_rows();
    if (c.world > 1) {
      EXPECT_GT(t->materialized_rows(), 0);
    }
  }
  EXPECT_LT(stored, kRows);
  EXPECT_GT(stored, 50);
  if (c.world == 1) {
    EXPECT_EQ(tables[0]->stats().lookup_bytes_sent, 0);
    EXPECT_EQ(tables[0]->stats().backward_bytes_sent, 0);
  } else {
    EXPECT_GT(tables[0]->stats().backward_bytes_sent, 0);
  }
  EXPECT_EQ(tables[0]->stats().lookups, kSteps);
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ShardedVsReplicatedTest,
    ::testing::Values(Case{1, RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks},
                      Case{2, RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks},
                      Case{3, RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks},
                      Case{4, RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks},
                      Case{1, RowOptimizerKind::kAdagrad, GradReduction::kMeanOverRanks},
                      Case{3, RowOptimizerKind::kAdagrad, GradReduction::kMeanOverRanks},
                      Case{4, RowOptimizerKind::kAdagrad, GradReduction::kSum}));

// Every id of every rank is owned by rank 0: ranks 1..3 serve nothing and send only to rank 0;
// duplicates of one id from all ranks sum at its owner.
TEST(ShardedEmbeddingTest, AllIdsOwnedByOneRank) {
  std::unique_ptr<CommGroup> group = MakeGroup(4);
  ShardedEmbeddingOptions o = Options(RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks);
  o.optimizer.momentum = 0;
  o.optimizer.lr = 1.0f;
  auto tables = MakeTables(*group, o);
  std::vector<int64_t> owned;
  for (int64_t id = 0; owned.size() < 3; ++id) {
    if (ShardedEmbedding::OwnerOf(id, 4, o.seed) == 0) owned.push_back(id);
  }
  std::vector<absl::Status> st = group->Run([&](int rank, Communicator&) -> absl::Status {
    std::vector<int64_t> ids = {owned[rank % 3], owned[0], owned[0]};
    ASSIGN_OR_RETURN(Tensor rows, tables[rank]->Lookup(ids));
    ASSIGN_OR_RETURN(Tensor grad, Tensor::Zeros({3, kDim}, DType::kFloat32));
    for (int64_t j = 0; j < kDim; ++j) grad.data<float>()[2 * kDim + j] = 1.0f;  // only the last
    return tables[rank]->Backward(ids, grad);
  });
  ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  std::vector<float> init(kDim);
  ShardedEmbedding::InitialRow(o.seed, owned[0], o.init_scale, absl::MakeSpan(init));
  std::vector<float> row = tables[0]->LocalRow(owned[0]).value();
  // Four ranks each sent gradient 1 for owned[0]; mean over ranks 1, lr 1: the row moved by 1.
  for (int64_t j = 0; j < kDim; ++j) EXPECT_FLOAT_EQ(row[j], init[j] - 1.0f);
  EXPECT_EQ(tables[0]->materialized_rows(), 3);  // zero gradients still count as updates
  for (int r = 1; r < 4; ++r) EXPECT_EQ(tables[r]->materialized_rows(), 0);
  // Rank 1 sent counts (8 B to each of 3 peers) and its 2 unique ids (16 B), served nothing.
  EXPECT_EQ(tables[1]->stats().lookup_bytes_sent, 3 * 8 + 2 * 8);
}

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(base ? base : "/tmp", "/", name, "-XXXXXX");
  PADDLE_CHECK(mkdtemp(path.data()) != nullptr) << path;
  return path;
}

// Trains on 4 ranks, saves, re-shards to 2 ranks and goes on training (momentum state must have
// moved with its rows), saves again and re-shards to 3.
TEST(ShardedEmbeddingTest, CheckpointReshards4To2To3) {
  const ShardedEmbeddingOptions o = Options(RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks);
  Replicated ref(o);
  const std::string dir4 = TempDir("emb4"), dir2 = TempDir("emb2");
  int step = 0;
  {
    std::unique_ptr<CommGroup> g4 = MakeGroup(4);
    auto t4 = MakeTables(*g4, o);
    for (; step < 3; ++step) TrainStep(*g4, t4, ref, step);
    std::vector<absl::Status> st =
        g4->Run([&](int rank, Communicator&) { return t4[rank]->Save(dir4); });
    ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  }
  {
    std::unique_ptr<CommGroup> g2 = MakeGroup(2);
    auto t2 = MakeTables(*g2, o);
    for (auto& t : t2) ASSERT_TRUE(t->Load(dir4).ok());
    ExpectSameRows(t2, ref);
    for (; step < 5; ++step) TrainStep(*g2, t2, ref, step);
    ExpectSameRows(t2, ref);
    std::vector<absl::Status> st =
        g2->Run([&](int rank, Communicator&) { return t2[rank]->Save(dir2); });
    ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  }
  std::unique_ptr<CommGroup> g3 = MakeGroup(3);
  auto t3 = MakeTables(*g3, o);
  for (auto& t : t3) ASSERT_TRUE(t->Load(dir2).ok());
  ExpectSameRows(t3, ref);
  for (; step < 7; ++step) TrainStep(*g3, t3, ref, step);
  ExpectSameRows(t3, ref);

  // Another table's checkpoint is refused, naming the field.
  for (auto [field, change] :
       std::vector<std::pair<std::string, std::function<void(ShardedEmbeddingOptions&)>>>{
           {"dim", [](ShardedEmbeddingOptions& x) { x.dim = 4; }},
           {"num_rows", [](ShardedEmbeddingOptions& x) { x.num_rows = 10; }},
           {"seed", [](ShardedEmbeddingOptions& x) { x.seed = 7; }},
           {"optimizer", [](ShardedEmbeddingOptions& x) {
              x.optimizer.kind = RowOptimizerKind::kAdagrad;
              x.optimizer.momentum = 0;
            }}}) {
    ShardedEmbeddingOptions other = o;
    change(other);
    auto t = ShardedEmbedding::Create(&g3->comm(0), other).value();
    absl::Status s = t->Load(dir2);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(absl::StrCat(field, " is")), std::string::npos) << s;
    EXPECT_NE(s.message().find("another table"), std::string::npos) << s;
  }
  ShardedEmbeddingOptions renamed = o;
  renamed.name = "other";
  EXPECT_EQ(ShardedEmbedding::Create(&g3->comm(0), renamed).value()->Load(dir2).code(),
            absl::StatusCode::kNotFound);
  // A missing shard.
  ASSERT_EQ(std::remove((dir2 + "/emb-shard-1-of-2.ckpt").c_str()), 0);
  absl::Status missing = t3[0]->Load(dir2);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("emb-shard-1-of-2.ckpt"), std::string::npos) << missing;
  ExpectSameRows(t3, ref);  // a failed Load changed nothing

  // Shards of two saves (an interrupted save) are refused.
  const std::string dir3a = TempDir("emb3a"), dir3b = TempDir("emb3b");
  auto save3 = [&](const std::string& dir) {
    std::vector<absl::Status> st =
        g3->Run([&](int rank, Communicator&) { return t3[rank]->Save(dir); });
    ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  };
  save3(dir3a);
  TrainStep(*g3, t3, ref, step++);
  save3(dir3b);
  std::filesystem::copy_file(dir3a + "/emb-shard-1-of-3.ckpt", dir3b + "/emb-shard-1-of-3.ckpt",
                             std::filesystem::copy_options::overwrite_existing);
  absl::Status mixed = t3[0]->Load(dir3b);
  EXPECT_EQ(mixed.code(), absl::StatusCode::kDataLoss) << mixed;
  EXPECT_NE(mixed.message().find("different saves"), std::string::npos) << mixed;
  ExpectSameRows(t3, ref);
}

TEST(ShardedEmbeddingTest, BadInputFailsOnEveryRankAndLeavesTheGroupUsable) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  const ShardedEmbeddingOptions o = Options(RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks);
  auto tables = MakeTables(*group, o);
  // Rank 1 looks up an id past the end.
  std::vector<absl::Status> st = group->Run([&](int rank, Communicator&) -> absl::Status {
    std::vector<int64_t> ids = {1, 2};
    if (rank == 1) ids = {1, 2, kRows, 4};
    return tables[rank]->Lookup(ids).status();
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(st[r].code(), absl::StatusCode::kInvalidArgument) << st[r];
  EXPECT_NE(st[1].message().find("id 3000 at position 2 is out of range [0, 3000)"),
            std::string::npos)
      << st[1];
  EXPECT_NE(st[1].message().find("rank 1/3"), std::string::npos) << st[1];
  EXPECT_NE(st[0].message().find("rank(s) 1 passed bad input"), std::string::npos) << st[0];
  // Rank 2 passes a negative id to Backward, rank 0 a gradient of the wrong shape.
  st = group->Run([&](int rank, Communicator&) -> absl::Status {
    std::vector<int64_t> ids = {1, 2};
    if (rank == 2) ids = {-5, 2};
    ASSIGN_OR_RETURN(Tensor grad, Tensor::Zeros({2, rank == 0 ? kDim + 1 : kDim}, DType::kFloat32));
    return tables[rank]->Backward(ids, grad);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(st[r].code(), absl::StatusCode::kInvalidArgument) << st[r];
  EXPECT_NE(st[0].message().find("[2, 8]"), std::string::npos) << st[0];
  EXPECT_NE(st[0].message().find("float32[2, 9]"), std::string::npos) << st[0];
  EXPECT_NE(st[2].message().find("id -5 at position 0"), std::string::npos) << st[2];
  EXPECT_NE(st[1].message().find("rank(s) 0, 2"), std::string::npos) << st[1];
  for (auto& t : tables) EXPECT_EQ(t->materialized_rows(), 0);  // nothing was applied
  // The communicator is still in step: a good step works on every rank.
  Replicated ref(o);
  TrainStep(*group, tables, ref, 1);
  ExpectSameRows(tables, ref);
  // LocalRow of a row another rank owns names the owner.
  const int owner = ShardedEmbedding::OwnerOf(0, 3, o.seed);
  absl::Status not_mine = tables[(owner + 1) % 3]->LocalRow(0).status();
  EXPECT_NE(not_mine.message().find(absl::StrCat("owned by rank ", owner)), std::string::npos)
      << not_mine;
}

TEST(ShardedEmbeddingTest, BadOptionsNameTheField) {
  std::unique_ptr<CommGroup> group = MakeGroup(1);
  auto expect = [&](const std::function<void(ShardedEmbeddingOptions&)>& change,
                    const std::string& field) {
    ShardedEmbeddingOptions o = Options(RowOptimizerKind::kSgd, GradReduction::kMeanOverRanks);
    change(o);
    absl::Status s = ShardedEmbedding::Create(&group->comm(0), o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  expect([](auto& o) { o.num_rows = 0; }, "num_rows");
  expect([](auto& o) { o.dim = -1; }, "dim");
  expect([](auto& o) { o.name = "a/b"; }, "name");
  expect([](auto& o) { o.optimizer.lr = NAN; }, "optimizer.lr");
  expect([](auto& o) { o.optimizer.momentum = 1.5f; }, "optimizer.momentum");
  expect([](auto& o) { o.init_scale = -1; }, "init_scale");
}

// The owner and initial rows depend only on (id, world size, seed): fixed values, and the owners
// spread evenly.
TEST(ShardedEmbeddingTest, OwnerAndInitialRowsAreFixedFunctions) {
  std::vector<int64_t> per_rank(4, 0);
  for (int64_t id = 0; id < 40000; ++id) ++per_rank[ShardedEmbedding::OwnerOf(id, 4, 42)];
  for (int64_t c : per_rank) EXPECT_NEAR(c, 10000, 400);
  for (int64_t id = 0; id < 100; ++id) EXPECT_EQ(ShardedEmbedding::OwnerOf(id, 1, 42), 0);
  std::vector<float> a(5), b(5), c(5);
  ShardedEmbedding::InitialRow(42, 7, 0.5f, absl::MakeSpan(a));
  ShardedEmbedding::InitialRow(42, 7, 0.5f, absl::MakeSpan(b));
  ShardedEmbedding::InitialRow(43, 7, 0.5f, absl::MakeSpan(c));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (float x : a) EXPECT_LE(std::abs(x), 0.5f);
}

}  // namespace
}  // namespace paddle
