// Tests of the sharded optimizer (paddle/parallel/zero_redundancy_optimizer.h) on 1-4 ranks as
// threads over the native communicator: 100 steps of SGD with momentum, Adam, AdamW, LARS and LAMB
// against the unsharded optimizer fed the same averaged gradients (slice boundaries cutting
// tensors, a world size that divides nothing, ranks that own nothing), state bytes per rank, a
// checkpoint saved at 2 ranks and loaded at 3, and errors: ranks that pass different parameters,
// a missing gradient, a checkpoint missing a key.
//
// Note [Exact test gradients]: every rank's gradient element is k / 64 with k an integer in
// [-8, 8], drawn from (seed, step, rank, parameter, index). Sums of up to 4 of them are exact in
// float32 whatever the order, and kAvg divides the exact sum once, so the reduce-scatter gives
// every element exactly the value the reference's allreduce gives. What differs then is only the
// optimizer: SGD and Adam must match bit for bit; LARS and LAMB only where a layer's sum of
// squares is added in another order, a layer being cut by a slice boundary.
#include "paddle/parallel/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CommGroup;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Key(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return Mix(Mix(Mix(Mix(Mix(a) ^ b) ^ c) ^ d) ^ e);
}

struct Model {
  std::vector<autograd::Variable> params;
};

// 76 elements in tensors of 35, 24, 5, 1 and 11; the first two are 2-D and 3-D, so not excluded
// from decay and trust ratios, and slice boundaries at 2, 3 and 4 ranks cut them.
const std::vector<std::pair<std::string, Shape>>& DefaultShapes() {
  static const auto* shapes =
      new std::vector<std::pair<std::string, Shape>>{{"fc.weight", {7, 5}},
                                                     {"conv.weight", {3, 4, 2}},
                                                     {"fc.bias", {5}},
                                                     {"scale", {1}},
                                                     {"out.bias", {11}}};
  return *shapes;
}

// The same values on every rank, with defined zero gradients to fill.
absl::StatusOr<Model> MakeModel(const std::vector<std::pair<std::string, Shape>>& shapes) {
  Model m;
  for (size_t p = 0; p < shapes.size(); ++p) {
    ASSIGN_OR_RETURN(Tensor value, Tensor::Empty(shapes[p].second, DType::kFloat32));
    for (int64_t i = 0; i < value.numel(); ++i) {
      value.data<float>()[i] = static_cast<float>(Key(1, p, i, 0, 0) % 2001) / 1000.0f - 1.0f;
    }
    autograd::Variable v(value, /*requires_grad=*/true, shapes[p].first);
    ASSIGN_OR_RETURN(Tensor grad, Tensor::Zeros(shapes[p].second, DType::kFloat32));
    RETURN_IF_ERROR(v.set_grad(grad));
    m.params.push_back(v);
  }
  return m;
}

// Note [Exact test gradients].
void FillGradients(const Model& m, int step, int rank) {
  for (size_t p = 0; p < m.params.size(); ++p) {
    const Tensor& g = m.params[p].grad();
    for (int64_t i = 0; i < g.numel(); ++i) {
      g.data<float>()[i] =
          static_cast<float>(static_cast<int>(Key(2, step, rank, p, i) % 17) - 8) / 64.0f;
    }
  }
}

ShardSet Whole(const Model& m) {
  ShardSet s;
  s.views = m.params;
  for (const autograd::Variable& v : m.params) s.params[v.name()] = v;
  return s;
}

struct Case {
  std::string name;
  OptimizerFactory factory;
  bool exact;  // bit for bit (else within kRelTolerance)
};

constexpr double kRelTolerance = 1e-6;

std::vector<Case> Cases() {
  optim::SgdOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 1e-3;
  optim::AdamOptions adam;
  adam.lr = 1e-2;
  adam.weight_decay = 1e-3;
  optim::AdamOptions adamw = optim::AdamWOptions();
  adamw.lr = 1e-2;
  optim::LarsOptions lars;
  lars.lr = 0.5;
  lars.eta = 0.02;
  optim::LambOptions lamb;
  lamb.lr = 1e-2;
  return {{"sgd", SgdFactory(sgd), true},
          {"adam", AdamFactory(adam), true},
          {"adamw", AdamFactory(adamw), true},
          {"lars", LarsFactory(lars), false},
          {"lamb", LambFactory(lamb), false}};
}

// Largest |a - b| / max(|b|, 1e-3) over every element; -1 if shapes differ.
double MaxRelDiff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return -1;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i];
    const double y = b.data<float>()[i];
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-3));
  }
  return worst;
}

// Runs `steps` steps of the sharded and the unsharded optimizer side by side on one rank; the
// reference averages with Allreduce(kAvg), the sharded one by its reduce-scatter.
struct RankResult {
  double max_rel = 0;  // sharded against unsharded, over all elements
  int64_t sharded_bytes = 0;
  int64_t whole_bytes = 0;
};

// Steps first..last of both optimizers on the same gradients.
absl::Status RunSteps(int first, int last, int rank, Communicator& comm, const Model& sharded,
                      const Model& whole, ZeroRedundancyOptimizer& zero,
                      optim::Optimizer& reference) {
  for (int step = first; step <= last; ++step) {
    FillGradients(sharded, step, rank);
    FillGradients(whole, step, rank);
    for (const autograd::Variable& v : whole.params) {
      RETURN_IF_ERROR(comm.Allreduce(v.grad(), ReduceOp::kAvg)->Wait());
    }
    RETURN_IF_ERROR(zero.Step());
    RETURN_IF_ERROR(reference.Step());
  }
  return absl::OkStatus();
}

double ModelRelDiff(const Model& a, const Model& b) {
  double worst = 0;
  for (size_t p = 0; p < a.params.size(); ++p) {
    const double d = MaxRelDiff(a.params[p].data(), b.params[p].data());
    if (d < 0) return 1e300;
    worst = std::max(worst, d);
  }
  return worst;
}

// `replace`: after Create, every value and gradient is swapped for a copy elsewhere, as a loaded
// state dict or DDP's reducer would (Note [Flat homes]: values move back, gradients are copied).
absl::Status TrainBoth(const Case& c, int steps, int rank, Communicator& comm,
                       const std::vector<std::pair<std::string, Shape>>& shapes, RankResult* out,
                       bool replace = false) {
  ASSIGN_OR_RETURN(Model sharded, MakeModel(shapes));
  ASSIGN_OR_RETURN(Model whole, MakeModel(shapes));
  ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                   ZeroRedundancyOptimizer::Create(sharded.params, &comm, c.factory));
  for (autograd::Variable& v : sharded.params) {
    if (!replace) continue;
    ASSIGN_OR_RETURN(Tensor value, v.data().Clone());
    RETURN_IF_ERROR(v.set_data(value));
    ASSIGN_OR_RETURN(Tensor grad, Tensor::Zeros(v.data().shape(), DType::kFloat32));
    RETURN_IF_ERROR(v.set_grad(grad));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> reference, c.factory(Whole(whole)));
  RETURN_IF_ERROR(RunSteps(1, steps, rank, comm, sharded, whole, *zero, *reference));
  out->max_rel = ModelRelDiff(sharded, whole);
  out->sharded_bytes = zero->OptimizerStateBytes();
  out->whole_bytes = reference->StateBytes();
  return absl::OkStatus();
}

std::unique_ptr<CommGroup> MakeGroup(int world) {
  commtest::GroupOptions go;
  go.world_size = world;
  return CommGroup::Create(go).value();
}

class ZeroTest : public ::testing::TestWithParam<int> {};

// 100 steps of every rule: the sharded parameters equal the unsharded ones, and the state bytes
// of the ranks add up to the unsharded state, each rank holding at most one block.
TEST_P(ZeroTest, EqualsUnshardedOptimizer) {
  const int world = GetParam();
  std::unique_ptr<CommGroup> group = MakeGroup(world);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<RankResult> results(world);
    const std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      return TrainBoth(c, 100, rank, comm, DefaultShapes(), &results[rank]);
    });
    int64_t total = 0;
    double worst = 0;
    for (int r = 0; r < world; ++r) {
      worst = std::max(worst, results[r].max_rel);
      ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
      if (c.exact) {
        EXPECT_EQ(results[r].max_rel, 0.0) << "rank " << r;
      } else {
        EXPECT_LE(results[r].max_rel, kRelTolerance) << "rank " << r;
      }
      const int64_t block = (76 + world - 1) / world;
      const int64_t slots = results[r].whole_bytes / (76 * 4);
      EXPECT_LE(results[r].sharded_bytes, slots * block * 4) << "rank " << r;
      total += results[r].sharded_bytes;
    }
    EXPECT_GT(results[0].whole_bytes, 0);
    EXPECT_EQ(total, results[0].whole_bytes);
    std::printf(
        "%s at %d ranks: state bytes rank 0 %lld of %lld unsharded, max rel diff over ranks %.3g\n",
        c.name.c_str(), world, static_cast<long long>(results[0].sharded_bytes),
        static_cast<long long>(results[0].whole_bytes), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroTest, ::testing::Values(1, 2, 3, 4));

// Note [Flat homes]: after Create the values, and the gradients, lie end to end in one buffer
// each; values and gradients replaced after Create still train exactly like the unsharded
// optimizer.
TEST(ZeroEdgeTest, FlatHomesAndReplacedTensors) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  const std::vector<absl::Status> homes = group->Run([&](int rank, Communicator& comm) {
    ASSIGN_OR_RETURN(Model m, MakeModel(DefaultShapes()));
    ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                     ZeroRedundancyOptimizer::Create(m.params, &comm, SgdFactory({})));
    const char* value0 = static_cast<const char*>(m.params[0].data().data());
    const char* grad0 = static_cast<const char*>(m.params[0].grad().data());
    int64_t at = 0;
    for (const autograd::Variable& v : m.params) {
      if (v.data().data() != value0 + at * 4 || v.grad().data() != grad0 + at * 4) {
        return absl::InternalError(absl::StrCat("'", v.name(), "' is not at element ", at));
      }
      at += v.data().numel();
    }
    return absl::OkStatus();
  });
  ASSERT_EQ(commtest::DescribeFailures(homes), "OK");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<RankResult> results(3);
    const std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      return TrainBoth(c, 20, rank, comm, DefaultShapes(), &results[rank], /*replace=*/true);
    });
    ASSERT_EQ(commtest::DescribeFailures(statuses), "OK");
    for (int r = 0; r < 3; ++r) {
      EXPECT_LE(results[r].max_rel, c.exact ? 0.0 : kRelTolerance) << "rank " << r;
    }
  }
}

// 3 elements over 4 ranks: the last rank owns nothing but joins every collective (LAMB's norm
// allreduce included).
TEST(ZeroEdgeTest, MoreRanksThanElements) {
  std::unique_ptr<CommGroup> group = MakeGroup(4);
  const std::vector<std::pair<std::string, Shape>> shapes = {{"w", {1, 2}}, {"b", {1}}};
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<RankResult> results(4);
    const std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      return TrainBoth(c, 20, rank, comm, shapes, &results[rank]);
    });
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
      EXPECT_LE(results[r].max_rel, c.exact ? 0.0 : kRelTolerance) << "rank " << r;
    }
    EXPECT_EQ(results[3].sharded_bytes, 0);
  }
}

// Ranks that pass different parameters fail together, naming every rank's element count.
TEST(ZeroEdgeTest, MismatchedParametersFailOnEveryRank) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  const std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    std::vector<std::pair<std::string, Shape>> shapes = {{"w", {2, 3}}};
    if (rank == 1) shapes[0].second = {2, 4};
    ASSIGN_OR_RETURN(Model m, MakeModel(shapes));
    return ZeroRedundancyOptimizer::Create(m.params, &comm, SgdFactory({})).status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kInvalidArgument) << statuses[r];
    EXPECT_NE(statuses[r].message().find("rank 0: 6, rank 1: 8"), std::string::npos) << statuses[r];
  }
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Note [Sharded checkpoints]: 30 steps at 2 ranks; the saved state equals the unsharded
// optimizer's bit for bit; a checkpoint file written from it loads at 3 ranks, and 30 more steps
// there still match the unsharded optimizer continuing from its own state.
TEST(ZeroCheckpointTest, SavedAtTwoRanksLoadsAtThree) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/zero_ckpt");
  std::filesystem::remove_all(dir);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = absl::StrCat(dir, "/", c.name);
    {
      std::unique_ptr<CommGroup> two = MakeGroup(2);
      const std::vector<absl::Status> statuses = two->Run([&](int rank, Communicator& comm) {
        ASSIGN_OR_RETURN(Model sharded, MakeModel(DefaultShapes()));
        ASSIGN_OR_RETURN(Model whole, MakeModel(DefaultShapes()));
        ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                         ZeroRedundancyOptimizer::Create(sharded.params, &comm, c.factory));
        ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> reference, c.factory(Whole(whole)));
        RETURN_IF_ERROR(RunSteps(1, 30, rank, comm, sharded, whole, *zero, *reference));
        checkpoint::CheckpointState state;
        RETURN_IF_ERROR(zero->SaveState(&state.tensors, &state.ints));  // collective
        std::map<std::string, Tensor> want_tensors;
        std::map<std::string, int64_t> want_ints;
        RETURN_IF_ERROR(reference->SaveState(&want_tensors, &want_ints));
        if (state.ints != want_ints || state.tensors.size() != want_tensors.size()) {
          return absl::InternalError("saved keys differ from the unsharded optimizer's");
        }
        for (const auto& [key, t] : want_tensors) {
          if (!SameBits(state.tensors[key], t)) {
            return absl::InternalError(absl::StrCat("saved '", key, "' differs"));
          }
        }
        if (ModelRelDiff(sharded, whole) > kRelTolerance) {
          return absl::InternalError("parameters differ before the save");
        }
        for (const autograd::Variable& v : whole.params) {
          state.tensors[absl::StrCat("param/", v.name())] = v.data();
        }
        if (rank != 0) return absl::OkStatus();
        return checkpoint::CheckpointManager(path).Save(30, state);
      });
      ASSERT_EQ(commtest::DescribeFailures(statuses), "OK");
    }
    std::unique_ptr<CommGroup> three = MakeGroup(3);
    std::vector<double> max_rel(3, -1);
    const std::vector<absl::Status> statuses = three->Run([&](int rank, Communicator& comm) {
      ASSIGN_OR_RETURN(checkpoint::LoadedCheckpoint loaded,
                       checkpoint::CheckpointManager(path).LoadLatest());
      const checkpoint::CheckpointState& state = loaded.state;
      ASSIGN_OR_RETURN(Model sharded, MakeModel(DefaultShapes()));
      ASSIGN_OR_RETURN(Model whole, MakeModel(DefaultShapes()));
      for (const Model* m : {&sharded, &whole}) {
        for (const autograd::Variable& v : m->params) {
          Tensor value = v.data();
          RETURN_IF_ERROR(value.CopyFrom(state.tensors.at(absl::StrCat("param/", v.name()))));
        }
      }
      ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                       ZeroRedundancyOptimizer::Create(sharded.params, &comm, c.factory));
      ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> reference, c.factory(Whole(whole)));
      // A bad checkpoint is refused, naming the key, on every rank (rank 0 has no piece of
      // conv.weight), and loads nothing.
      std::map<std::string, Tensor> broken = state.tensors;
      broken.erase(absl::StrCat("optim/conv.weight/", reference->slot_names().back()));
      const absl::Status refused = zero->LoadState(broken, state.ints);
      if (refused.ok() || refused.message().find("conv.weight") == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("broken checkpoint: ", refused.ToString()));
      }
      RETURN_IF_ERROR(zero->LoadState(state.tensors, state.ints));
      RETURN_IF_ERROR(reference->LoadState(state.tensors, state.ints));
      if (zero->step_count() != 30) return absl::InternalError("step count not restored");
      RETURN_IF_ERROR(RunSteps(31, 60, rank, comm, sharded, whole, *zero, *reference));
      max_rel[rank] = ModelRelDiff(sharded, whole);
      return absl::OkStatus();
    });
    ASSERT_EQ(commtest::DescribeFailures(statuses), "OK");
    for (int r = 0; r < 3; ++r) {
      EXPECT_GE(max_rel[r], 0.0);
      EXPECT_LE(max_rel[r], c.exact ? 0.0 : kRelTolerance) << "rank " << r;
    }
  }
}

// A parameter without a gradient is an error naming it, before any communication (here on every
// rank, so no peer waits in the reduce-scatter).
TEST(ZeroEdgeTest, MissingGradientIsAnError) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  const std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    ASSIGN_OR_RETURN(Model m, MakeModel(DefaultShapes()));
    ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                     ZeroRedundancyOptimizer::Create(m.params, &comm, SgdFactory({})));
    m.params[2].ResetGrad();
    return zero->Step();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kFailedPrecondition) << statuses[r];
    EXPECT_NE(statuses[r].message().find("'fc.bias' has gradient undefined"), std::string::npos)
        << statuses[r];
    EXPECT_NE(statuses[r].message().find(absl::StrCat("rank ", r, "/2")), std::string::npos)
        << statuses[r];
  }
}

}  // namespace
}  // namespace paddle
