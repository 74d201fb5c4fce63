// Tests of ElasticState (commit, rollback, broadcast to ranks without state) and of the global
// batch split (paddle/parallel/global_batch.h).
#include "paddle/parallel/elastic_state.h"

#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/models.h"
#include "paddle/optim/sgd.h"
#include "paddle/parallel/global_batch.h"

namespace paddle {
namespace {

struct Replica {
  std::shared_ptr<nn::Generator> dropout;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<ElasticState> state;
};

Replica MakeReplica(const std::string& model, uint64_t seed) {
  Replica r;
  r.dropout = std::make_shared<nn::Generator>(seed, 1);
  r.model = nn::MakeModel(model, seed, r.dropout).value();
  optim::SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  r.opt = optim::Sgd::Create(r.model->Parameters(), o).value();
  r.state = std::make_unique<ElasticState>(r.model.get(), r.opt.get());
  return r;
}

// One SGD step on a batch made from `seed` (changes parameters and momentum).
void TrainStep(Replica& r, int seed) {
  Tensor x = Tensor::Empty({4, 1, 28, 28}, DType::kFloat32).value();
  Tensor y = Tensor::Empty({4}, DType::kInt64).value();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = ((i * 7 + seed) % 13) / 13.0f;
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = (i + seed) % 10;
  r.opt->ZeroGrad();
  nn::Variable logits = r.model->Forward(nn::Variable(x)).value();
  nn::Variable loss = nn::functional::SoftmaxCrossEntropy(logits, y).value();
  ASSERT_TRUE(loss.Backward().ok());
  ASSERT_TRUE(r.opt->Step().ok());
}

// Every parameter, buffer and optimizer slot, as bytes.
std::vector<std::vector<char>> Snapshot(const Replica& r) {
  std::vector<std::vector<char>> out;
  auto add = [&out](const Tensor& t) {
    Tensor c = t.Contiguous().value();
    const char* p = static_cast<const char*>(c.data());
    out.emplace_back(p, p + c.nbytes());
  };
  for (const auto& [name, t] : r.model->StateDict()) add(t);
  for (int64_t i = 0; i < r.opt->num_params(); ++i) {
    for (size_t s = 0; s < r.opt->slot_names().size(); ++s) add(r.opt->state(i, s));
  }
  return out;
}

// The commit through a checkpoint file on disk (CheckpointManager) into a fresh replica: the
// same bytes, progress (the global data position) and extras; a checkpoint of another model or
// without an extra is an error that leaves the live state alone.
TEST(ElasticStateTest, CheckpointRoundTripThroughAFile) {
  Replica a = MakeReplica("mlp", 1);
  EXPECT_EQ(a.state->ToCheckpoint().status().code(), absl::StatusCode::kFailedPrecondition);
  TrainStep(a, 1);
  TrainStep(a, 2);
  a.state->progress() = {1, 950, 5184, 7.5, 12};
  a.state->extras()["rng/dropout_offset"] = 77;
  ASSERT_TRUE(a.state->Commit().ok());
  TrainStep(a, 3);  // the live state moves on; the checkpoint holds the commit
  const std::string dir = absl::StrCat(testing::TempDir(), "/elastic_ckpt_", getpid());
  checkpoint::CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(950, a.state->ToCheckpoint().value()).ok());
  ASSERT_TRUE(a.state->Rollback().ok());
  std::vector<std::vector<char>> committed = Snapshot(a);

  Replica b = MakeReplica("mlp", 9);  // other weights
  b.state->extras()["rng/dropout_offset"] = 0;
  absl::StatusOr<checkpoint::LoadedCheckpoint> loaded = manager.LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(b.state->FromCheckpoint(loaded->state).ok());
  EXPECT_EQ(Snapshot(b), committed);
  EXPECT_EQ(b.state->progress(), (TrainProgress{1, 950, 5184, 7.5, 12}));
  EXPECT_EQ(b.state->committed(), (TrainProgress{1, 950, 5184, 7.5, 12}));
  EXPECT_EQ(b.state->extras()["rng/dropout_offset"], 77);
  EXPECT_EQ(b.opt->step_count(), 2);
  EXPECT_EQ(b.state->commit_bytes(), a.state->commit_bytes());

  // Another model: an error naming a tensor; the live state is untouched.
  Replica c = MakeReplica("cnn", 3);
  c.state->extras()["rng/dropout_offset"] = 0;
  std::vector<std::vector<char>> before = Snapshot(c);
  absl::Status st = c.state->FromCheckpoint(loaded->state);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("model tensor"), absl::string_view::npos) << st;
  EXPECT_EQ(Snapshot(c), before);
  EXPECT_FALSE(c.state->has_commit());
  // An extra the program has that the checkpoint lacks.
  Replica d = MakeReplica("mlp", 4);
  d.state->extras()["rng/dropout_offset"] = 0;
  d.state->extras()["data/cursor"] = 0;
  st = d.state->FromCheckpoint(loaded->state);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("extra/data/cursor"), absl::string_view::npos) << st;
}

TEST(ElasticStateTest, RollbackRestoresEverythingBitwise) {
  Replica r = MakeReplica("mlp", 1);
  TrainStep(r, 1);
  r.state->progress() = {2, 17, 384, 3.25, 5};
  r.state->extras()["rng/dropout_offset"] = 42;
  ASSERT_TRUE(r.state->Commit().ok());
  std::vector<std::vector<char>> at_commit = Snapshot(r);
  EXPECT_GT(r.state->commit_bytes(), 0);
  TrainStep(r, 2);
  TrainStep(r, 3);
  r.state->progress().step = 19;
  r.state->extras()["rng/dropout_offset"] = 99;
  ASSERT_NE(Snapshot(r), at_commit);
  ASSERT_TRUE(r.state->Rollback().ok());
  EXPECT_EQ(Snapshot(r), at_commit);
  EXPECT_EQ(r.state->progress(), (TrainProgress{2, 17, 384, 3.25, 5}));
  EXPECT_EQ(r.state->extras()["rng/dropout_offset"], 42);
  EXPECT_EQ(r.opt->step_count(), 1);
  // A second commit reuses the buffers and still records the new values.
  TrainStep(r, 4);
  ASSERT_TRUE(r.state->Commit().ok());
  std::vector<std::vector<char>> second = Snapshot(r);
  TrainStep(r, 5);
  ASSERT_TRUE(r.state->Rollback().ok());
  EXPECT_EQ(Snapshot(r), second);
}

TEST(ElasticStateTest, RollbackWithoutCommitFails) {
  Replica r = MakeReplica("mlp", 1);
  absl::Status s = r.state->Rollback();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("nothing has been committed"), std::string::npos) << s;
}

// Runs fn(rank, comm) on `n` threads, each with a native communicator over one HashStore.
void OnRanks(int n, const std::function<void(int, Communicator&)>& fn) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions o;
      o.store = store;
      o.rank = rank;
      o.world_size = n;
      o.timeout = absl::Seconds(60);
      std::unique_ptr<Communicator> comm = Communicator::Create(o).value();
      fn(rank, *comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ElasticStateTest, BroadcastGivesJoinersTheRootsCommit) {
  constexpr int kRanks = 3;
  std::vector<Replica> replicas;
  for (int r = 0; r < kRanks; ++r) replicas.push_back(MakeReplica("mlp", r == 0 ? 1 : 7 + r));
  TrainStep(replicas[0], 1);
  replicas[0].state->progress() = {1, 40, 1280, 9.5, 3};
  replicas[0].state->extras()["x"] = 5;
  ASSERT_TRUE(replicas[0].state->Commit().ok());
  for (int r = 1; r < kRanks; ++r) replicas[r].state->extras()["x"] = -1;  // same keys
  std::vector<std::vector<char>> root = Snapshot(replicas[0]);
  std::vector<absl::Status> results(kRanks);
  OnRanks(kRanks, [&](int rank, Communicator& comm) {
    results[rank] = replicas[rank].state->Broadcast(comm, 0);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(Snapshot(replicas[r]), root) << "rank " << r;
    EXPECT_EQ(replicas[r].state->progress(), (TrainProgress{1, 40, 1280, 9.5, 3}));
    EXPECT_EQ(replicas[r].state->committed(), (TrainProgress{1, 40, 1280, 9.5, 3}));
    EXPECT_EQ(replicas[r].state->extras()["x"], 5);
    EXPECT_EQ(replicas[r].opt->step_count(), 1);
  }
}

TEST(ElasticStateTest, BroadcastOfDifferentModelsFailsOnEveryRank) {
  std::vector<Replica> replicas;
  replicas.push_back(MakeReplica("mlp", 1));
  replicas.push_back(MakeReplica("cnn", 1));
  std::vector<absl::Status> results(2);
  OnRanks(2, [&](int rank, Communicator& comm) {
    results[rank] = replicas[rank].state->Broadcast(comm, 0);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument) << results[r];
    EXPECT_NE(results[r].message().find("same model and optimizer"), std::string::npos);
  }
}

TEST(GlobalBatchTest, SharesTileTheBatchAtEveryWorldSize) {
  for (int world = 1; world <= 7; ++world) {
    for (int64_t position : {int64_t{0}, int64_t{100}, int64_t{990}}) {
      int64_t next = 0, smallest = 1 << 30, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        BatchShare s = ShareOfGlobalBatch(1000, position, 32, rank, world).value();
        EXPECT_EQ(s.global_size, position == 990 ? 10 : 32);
        EXPECT_EQ(s.begin, next) << "world " << world << " rank " << rank;
        next += s.count;
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
      }
      EXPECT_EQ(next, position == 990 ? 10 : 32) << "world " << world;
      EXPECT_LE(largest - smallest, 1) << "world " << world;
    }
  }
  EXPECT_EQ(StepsPerEpoch(1000, 32), 32);
  EXPECT_EQ(StepsPerEpoch(1024, 32), 32);
}

TEST(GlobalBatchTest, BadInputsAreErrorsNamingTheValues) {
  absl::StatusOr<BatchShare> s = ShareOfGlobalBatch(1000, 1000, 32, 0, 4);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("position 1000"), std::string::npos) << s.status();
  EXPECT_FALSE(ShareOfGlobalBatch(1000, 0, 32, 4, 4).ok());
  EXPECT_FALSE(ShareOfGlobalBatch(1000, 0, 0, 0, 4).ok());
  EXPECT_FALSE(EpochOrder(10, 1, -1).ok());
}

TEST(GlobalBatchTest, EpochOrderIsAPermutationOfSeedAndEpochOnly) {
  std::vector<int64_t> a = EpochOrder(100, 3, 2).value();
  std::vector<int64_t> b = EpochOrder(100, 3, 2).value();
  std::vector<int64_t> c = EpochOrder(100, 3, 3).value();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
}

}  // namespace
}  // namespace paddle
