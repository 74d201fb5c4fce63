// Tests of LocalSgd (paddle/parallel/local_sgd.h) on ranks as threads: replicas bit-identical
// right after each average and different between them, H = 1 (and a warm-up under DDP) matching
// synchronous DDP, outer momentum keeping replicas identical, and bad options.
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
#include "paddle/nn/functional.h"
#include "paddle/nn/models.h"
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

}  // namespace
}  // namespace paddle
