// Tests of LocalSgd (paddle/parallel/local_sgd.h) on ranks as threads: replicas bit-identical
// right after each average and different between them, H = 1 (and a warm-up under DDP) matching
// synchronous DDP, outer momentum keeping replicas identical, bad options, and sparse tables
// averaged by their touched rows (Note [Local SGD of sparse tables]) matching the dense average
// with fewer bytes, falling back to it when it is cheaper or the rows are unknown.
#include "paddle/parallel/local_sgd.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/embedding.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/layers.h"
#include "paddle/nn/models.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/sgd.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CommGroup;

constexpr int kBatch = 8;

std::unique_ptr<CommGroup> MakeGroup(int world) {
  commtest::GroupOptions o;
  o.world_size = world;
  return CommGroup::Create(o).value();
}

// Rank `rank`'s batch of step `step`: pixels and labels from (step, rank, index).
std::pair<Tensor, Tensor> Batch(int step, int rank) {
  Tensor x = Tensor::Empty({kBatch, 1, 28, 28}, DType::kFloat32).value();
  Tensor y = Tensor::Empty({kBatch}, DType::kInt64).value();
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<float>()[i] = static_cast<float>((i * 31 + step * 17 + rank * 7) % 23) / 23.0f;
  }
  for (int64_t i = 0; i < kBatch; ++i) y.data<int64_t>()[i] = (i * 3 + step + rank) % 10;
  return {x, y};
}

// Every parameter's values, flattened.
std::vector<float> Flat(nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.Parameters()) {
    const float* d = p.data().data<float>();
    out.insert(out.end(), d, d + p.data().numel());
  }
  return out;
}

struct Config {
  int steps = 6;
  bool ddp = false;       // DDP wraps the model (gradient sync as LocalSgd says, or always)
  bool local_sgd = true;  // false: plain synchronous DDP
  LocalSgdOptions options;
};

// Trains `run.steps` steps on every rank; returns each rank's parameters after every step, and
// whether LocalSgd averaged after it.
struct Trace {
  std::vector<std::vector<std::vector<float>>> params;  // [rank][step]
  std::vector<std::vector<bool>> averaged;              // [rank][step]
  std::vector<std::vector<float>> final_params;         // [rank], after Synchronize()
};

Trace Train(CommGroup& group, const Config& run) {
  const int world = group.size();
  Trace trace;
  trace.params.resize(world);
  trace.averaged.resize(world);
  trace.final_params.resize(world);
  std::vector<absl::Status> st = group.Run([&](int rank, Communicator& comm) -> absl::Status {
    // Different initial weights per rank: Create must broadcast rank 0's.
    ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> model,
                     nn::MakeModel("mlp", 1 + (run.local_sgd ? rank : 0), nullptr));
    optim::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.weight_decay = 1e-4;
    ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> opt,
                     optim::Sgd::Create(model->Parameters(), so));
    std::unique_ptr<DistributedDataParallel> ddp;
    if (run.ddp) {
      ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(model, &comm));
    }
    std::unique_ptr<LocalSgd> local;
    if (run.local_sgd) {
      ASSIGN_OR_RETURN(local, LocalSgd::Create(model, &comm, run.options, ddp.get()));
    }
    for (int step = 0; step < run.steps; ++step) {
      auto [x, y] = Batch(step, rank);
      opt->ZeroGrad();
      ASSIGN_OR_RETURN(nn::Variable logits, model->Forward(nn::Variable(x)));
      ASSIGN_OR_RETURN(nn::Variable loss, nn::functional::SoftmaxCrossEntropy(logits, y));
      RETURN_IF_ERROR(ddp ? ddp->Backward(loss) : loss.Backward());
      RETURN_IF_ERROR(opt->Step());
      bool averaged = false;
      if (local) {
        ASSIGN_OR_RETURN(averaged, local->AfterStep());
      }
      trace.params[rank].push_back(Flat(*model));
      trace.averaged[rank].push_back(averaged);
    }
    if (local) {
      RETURN_IF_ERROR(local->Synchronize());
      trace.final_params[rank] = Flat(*model);
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  return trace;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

TEST(LocalSgdTest, ReplicasBitEqualRightAfterEachAverageAndApartBetween) {
  for (int world : {2, 3}) {
    std::unique_ptr<CommGroup> group = MakeGroup(world);
    for (double outer_momentum : {0.0, 0.5}) {
      Config run;
      run.steps = 7;
      run.options.period = 3;
      run.options.outer_momentum = outer_momentum;
      Trace t = Train(*group, run);
      if (HasFailure()) return;
      for (int step = 0; step < run.steps; ++step) {
        SCOPED_TRACE(
            absl::StrCat("world ", world, " outer_momentum ", outer_momentum, " step ", step + 1));
        const bool should_average = (step + 1) % 3 == 0;
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(t.averaged[r][step], should_average);
          if (r == 0) continue;
          if (should_average) {
            EXPECT_TRUE(BitEqual(t.params[r][step], t.params[0][step]));
          } else {
            EXPECT_GT(MaxDiff(t.params[r][step], t.params[0][step]), 1e-6);
          }
        }
      }
      // Step 7 was local: Synchronize averages once more and the replicas agree again.
      for (int r = 1; r < world; ++r) EXPECT_TRUE(BitEqual(t.final_params[r], t.final_params[0]));
      EXPECT_FALSE(BitEqual(t.final_params[0], t.params[0][run.steps - 1]));
    }
  }
}

TEST(LocalSgdTest, PeriodOneAndWarmupMatchSynchronousDdp) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  Config synchronous;
  synchronous.ddp = true;
  synchronous.local_sgd = false;
  Trace want = Train(*group, synchronous);

  Config h1;  // no DDP: parameters averaged after every local step
  h1.options.period = 1;
  Trace got = Train(*group, h1);

  Config warm;  // DDP's gradient sync for 3 steps, then local steps averaged every step
  warm.ddp = true;
  warm.options.period = 1;
  warm.options.warmup_steps = 3;
  Trace warmed = Train(*group, warm);

  Config warm_h2 =
      warm;  // the same warm-up, then H = 2: identical to sync through the warm-up only
  warm_h2.options.period = 2;
  Trace warmed_h2 = Train(*group, warm_h2);
  if (HasFailure()) return;

  for (int step = 0; step < synchronous.steps; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step + 1));
    for (int r = 0; r < 3; ++r) {
      // SGD with momentum and weight decay is linear in the gradient: averaging parameters after
      // local steps equals stepping on the averaged gradient, up to float32 rounding.
      EXPECT_LT(MaxDiff(got.params[r][step], want.params[r][step]), 2e-5);
      EXPECT_LT(MaxDiff(warmed.params[r][step], want.params[r][step]), 2e-5);
      EXPECT_EQ(warmed.averaged[r][step], step >= 3);
      if (step < 3) {
        EXPECT_TRUE(BitEqual(warmed_h2.params[r][step], want.params[r][step]));  // DDP itself
      }
    }
  }
  // After the warm-up the H = 2 run is local on step 4 (replicas differ) and averages on step 5.
  EXPECT_GT(MaxDiff(warmed_h2.params[1][3], warmed_h2.params[0][3]), 1e-6);
  EXPECT_TRUE(BitEqual(warmed_h2.params[1][4], warmed_h2.params[0][4]));
}

TEST(LocalSgdTest, BadOptionsNameTheField) {
  std::unique_ptr<CommGroup> group = MakeGroup(1);
  std::shared_ptr<nn::Module> model = nn::MakeModel("mlp", 1, nullptr).value();
  struct Case {
    LocalSgdOptions options;
    std::string want;
  };
  std::vector<Case> cases(4);
  cases[0].options.period = 0;
  cases[0].want = "period must be >= 1, got 0";
  cases[1].options.warmup_steps = -1;
  cases[1].want = "warmup_steps must be >= 0";
  cases[2].options.outer_momentum = 1.0;
  cases[2].want = "outer_momentum must be in [0, 1)";
  cases[3].options.outer_lr = NAN;
  cases[3].want = "outer_lr must be positive";
  for (const Case& c : cases) {
    absl::Status st = LocalSgd::Create(model, &group->comm(0), c.options).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st;
  }
}

// Sparse tables: an Embedding(sparse = true) + Linear model.

constexpr int64_t kTableBatch = 2;  // samples per rank and step
constexpr int64_t kIdsPerSample = 6;
constexpr int64_t kEmbDim = 8;
constexpr int kTableSteps = 7;
// The sparse and the dense average reduce the same float32 values in different orders (an
// allreduce of the touched rows vs of the flat buffer of all parameters): equal on 2 ranks, a
// few ulps apart on 3. 1e-5 absolute on parameters of magnitude ~1 after 7 steps.
constexpr double kTableTol = 1e-5;

class TableModel : public nn::Module {
 public:
  explicit TableModel(int64_t rows) : Module("TableModel") {
    nn::Generator gen(7);
    emb_ = RegisterModule("emb", std::make_shared<nn::Embedding>(rows, kEmbDim, &gen, true));
    fc_ = RegisterModule("fc", std::make_shared<nn::Linear>(kIdsPerSample * kEmbDim, 3, &gen));
  }
  absl::StatusOr<nn::Variable> Forward(const nn::Variable& ids) override {
    ASSIGN_OR_RETURN(nn::Variable e, emb_->Forward(ids));
    ASSIGN_OR_RETURN(nn::Variable flat,
                     nn::functional::Reshape(e, {kTableBatch, kIdsPerSample * kEmbDim}));
    return fc_->Forward(flat);
  }

 private:
  std::shared_ptr<nn::Embedding> emb_;
  std::shared_ptr<nn::Linear> fc_;
};

enum class Touch {
  kOverlap,   // every rank draws from rows [0, 60) of 200: partly the same rows
  kDisjoint,  // rank r draws from rows [60 r, 60 r + 60) of 200 only
  kIdleLast,  // kOverlap, but the last rank takes no lookup (no gradient, an empty id list)
  kAll,       // every rank touches every row of a 12-row table each step: dense is cheaper
};

struct TableRun {
  Touch touch = Touch::kOverlap;
  int64_t period = 3;
  std::string optimizer = "sgd";  // SGD with momentum and weight decay, or "adamw"
  bool sparse_tables = true;
  bool zero_grad_before_after_step = false;  // the gradient is gone when AfterStep runs
  double outer_momentum = 0;
};

Tensor TableIds(Touch touch, int step, int rank) {
  Tensor t = Tensor::Empty({kTableBatch, kIdsPerSample}, DType::kInt64).value();
  for (int64_t k = 0; k < t.numel(); ++k) {
    const int64_t spread = (step * 7 + rank * 3 + k * 11) % 60;
    int64_t id = spread;
    if (touch == Touch::kAll) id = (k + step) % 12;
    if (touch == Touch::kDisjoint) id = 60 * rank + (step * 7 + k * 11) % 60;
    t.data<int64_t>()[k] = id;
  }
  return t;
}

Tensor TableLabels(int step, int rank) {
  Tensor y = Tensor::Empty({kTableBatch}, DType::kInt64).value();
  for (int64_t i = 0; i < kTableBatch; ++i) y.data<int64_t>()[i] = (i * 7 + step * 3 + rank) % 3;
  return y;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> TableOptimizer(const std::string& name,
                                                                 std::vector<nn::Variable> params) {
  if (name == "adamw") {
    optim::AdamOptions ao = optim::AdamWOptions();
    ao.lr = 0.01;
    return optim::Adam::Create(std::move(params), ao);
  }
  optim::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  so.weight_decay = 1e-3;  // on the table's touched rows only (Note [Lazy sparse updates])
  return optim::Sgd::Create(std::move(params), so);
}

struct TableTrace {
  Trace trace;
  std::vector<int64_t> bytes;  // [rank] averaged_bytes()
  int64_t averages = 0;        // rank 0's, Synchronize included
};

TableTrace TrainTable(CommGroup& group, const TableRun& run) {
  const int world = group.size();
  TableTrace out;
  Trace& trace = out.trace;
  trace.params.resize(world);
  trace.averaged.resize(world);
  trace.final_params.resize(world);
  out.bytes.resize(world);
  std::vector<absl::Status> st = group.Run([&](int rank, Communicator& comm) -> absl::Status {
    auto model = std::make_shared<TableModel>(run.touch == Touch::kAll ? 12 : 200);
    ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> opt,
                     TableOptimizer(run.optimizer, model->Parameters()));
    LocalSgdOptions lo;
    lo.period = run.period;
    lo.sparse_tables = run.sparse_tables;
    lo.outer_momentum = run.outer_momentum;
    ASSIGN_OR_RETURN(std::unique_ptr<LocalSgd> local, LocalSgd::Create(model, &comm, lo));
    const bool idle = run.touch == Touch::kIdleLast && rank == world - 1;
    for (int step = 0; step < kTableSteps; ++step) {
      opt->ZeroGrad();
      if (!idle) {
        ASSIGN_OR_RETURN(nn::Variable logits,
                         model->Forward(nn::Variable(TableIds(run.touch, step, rank))));
        ASSIGN_OR_RETURN(nn::Variable loss,
                         nn::functional::SoftmaxCrossEntropy(logits, TableLabels(step, rank)));
        RETURN_IF_ERROR(loss.Backward());
      }
      RETURN_IF_ERROR(opt->Step());
      if (run.zero_grad_before_after_step) opt->ZeroGrad();
      ASSIGN_OR_RETURN(bool averaged, local->AfterStep());
      trace.params[rank].push_back(Flat(*model));
      trace.averaged[rank].push_back(averaged);
    }
    RETURN_IF_ERROR(local->Synchronize());
    trace.final_params[rank] = Flat(*model);
    out.bytes[rank] = local->averaged_bytes();
    if (rank == 0) out.averages = local->averages();
    return absl::OkStatus();
  });
  EXPECT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  return out;
}

// `got` follows `want` within kTableTol at every step and rank, averages on the same steps, and
// its replicas are bit-identical right after each average and at the end.
void ExpectSameTraining(const TableTrace& got, const TableTrace& want, int world) {
  for (int step = 0; step < kTableSteps; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step + 1));
    for (int r = 0; r < world; ++r) {
      EXPECT_LT(MaxDiff(got.trace.params[r][step], want.trace.params[r][step]), kTableTol);
      EXPECT_EQ(got.trace.averaged[r][step], want.trace.averaged[r][step]);
      if (got.trace.averaged[r][step]) {
        EXPECT_TRUE(BitEqual(got.trace.params[r][step], got.trace.params[0][step]));
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(BitEqual(got.trace.final_params[r], got.trace.final_params[0]));
    EXPECT_LT(MaxDiff(got.trace.final_params[r], want.trace.final_params[r]), kTableTol);
    // Two ranks: each average is a + b either way, which commutes, so nothing differs at all.
    if (world == 2) EXPECT_TRUE(BitEqual(got.trace.final_params[r], want.trace.final_params[r]));
    EXPECT_EQ(got.bytes[r], got.bytes[0]);
  }
}

TEST(LocalSgdTest, SparseTableMatchesDenseAverageWithFewerBytes) {
  for (int world : {2, 3}) {
    std::unique_ptr<CommGroup> group = MakeGroup(world);
    for (int64_t period : {1, 3}) {
      for (Touch touch : {Touch::kOverlap, Touch::kDisjoint, Touch::kIdleLast}) {
        for (const char* optimizer : {"sgd", "adamw"}) {
          SCOPED_TRACE(absl::StrCat("world ", world, " H ", period, " touch ",
                                    static_cast<int>(touch), " ", optimizer));
          TableRun run;
          run.touch = touch;
          run.period = period;
          run.optimizer = optimizer;
          TableTrace got = TrainTable(*group, run);
          run.sparse_tables = false;
          TableTrace want = TrainTable(*group, run);
          if (HasFailure()) return;
          ExpectSameTraining(got, want, world);
          EXPECT_LT(got.bytes[0], want.bytes[0]);
        }
      }
    }
  }
}

TEST(LocalSgdTest, SparseTableAveragedDenselyWhenCheaperOrRowsUnknown) {
  for (int world : {2, 3}) {
    std::unique_ptr<CommGroup> group = MakeGroup(world);
    TableRun all;  // E >= num_rows: the dense choice, plus the counts allgather
    all.touch = Touch::kAll;
    TableRun dropped;  // ZeroGrad before AfterStep: the table moved with no gradient to name rows
    dropped.zero_grad_before_after_step = true;
    for (const TableRun& base : {all, dropped}) {
      SCOPED_TRACE(absl::StrCat("world ", world, " touch ", static_cast<int>(base.touch)));
      TableRun dense = base;
      dense.sparse_tables = false;
      TableTrace got = TrainTable(*group, base);
      TableTrace want = TrainTable(*group, dense);
      if (HasFailure()) return;
      ExpectSameTraining(got, want, world);
      // The table's allreduce apart from the rest rounds the ring model once more per average.
      const int64_t counts_bytes = (world - 1) * 8 * got.averages;
      EXPECT_NEAR(got.bytes[0], want.bytes[0] + counts_bytes, got.averages);
    }
    // Outer momentum moves untouched rows: the tables go the dense way, bit for bit.
    TableRun slowmo;
    slowmo.outer_momentum = 0.5;
    TableRun slowmo_dense = slowmo;
    slowmo_dense.sparse_tables = false;
    TableTrace got = TrainTable(*group, slowmo);
    TableTrace want = TrainTable(*group, slowmo_dense);
    if (HasFailure()) return;
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(BitEqual(got.trace.final_params[r], want.trace.final_params[r]));
    }
    EXPECT_EQ(got.bytes[0], want.bytes[0]);
  }
}

}  // namespace
}  // namespace paddle
