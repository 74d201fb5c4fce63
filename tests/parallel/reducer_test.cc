// The Reducer's paths besides plain equivalence, through DistributedDataParallel with ranks as
// threads: unused parameters (found, and the error without find_unused_parameters), ranks
// disagreeing on used parameters, no-sync accumulation, a rank with a different model, the bucket
// rebuild, a timed-out bucket, stats and the bucket callback, and the argument errors.
#include "paddle/parallel/reducer/reducer.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/models.h"
#include "tests/parallel/ddp_testing.h"

namespace paddle::ddptest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::shared_ptr<nn::Module> Mlp(int /*rank*/) {
  return *nn::MakeModel("mlp", 7, std::make_shared<nn::Generator>(1));
}

absl::StatusOr<std::map<std::string, Tensor>> Grads(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, var] : model.NamedParameters()) {
    ASSIGN_OR_RETURN(out[name], var.grad().Clone());
  }
  return out;
}

// One forward and backward (with the reduction) of rows [begin, end) of batch 0.
absl::Status ForwardBackward(DistributedDataParallel& ddp, int64_t begin, int64_t end) {
  Batch batch = MakeBatch(5, 0, 12, begin, end);
  ASSIGN_OR_RETURN(autograd::Variable logits, ddp.Forward(autograd::Variable(batch.x)));
  ASSIGN_OR_RETURN(autograd::Variable loss,
                   nn::functional::SoftmaxCrossEntropy(logits, batch.labels));
  return ddp.Backward(loss);
}

// The gradient of the whole batch 0 (12 rows) on one process.
std::map<std::string, Tensor> ReferenceGrads(const std::shared_ptr<nn::Module>& model) {
  Batch batch = MakeBatch(5, 0, 12, 0, 12);
  autograd::Variable logits = *model->Forward(autograd::Variable(batch.x));
  PADDLE_CHECK_OK((*nn::functional::SoftmaxCrossEntropy(logits, batch.labels)).Backward());
  return *Grads(*model);
}

TEST(ReducerTest, FindUnusedParametersZeroesUnusedGradients) {
  TrainConfig config;
  config.make_model = [](int) { return std::make_shared<SkipModel>(16, false); };
  absl::StatusOr<std::map<std::string, Tensor>> want = TrainReference(config);
  ASSERT_TRUE(want.ok()) << want.status();
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  DdpOptions options;
  options.find_unused_parameters = true;
  options.first_bucket_bytes = options.bucket_bytes = 2048;  // skip.* share no bucket with fc1
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    std::unique_ptr<DistributedDataParallel> ddp;
    ASSIGN_OR_RETURN(auto got, TrainRank(config, options, rank, comm, &ddp));
    RETURN_IF_ERROR(CompareParams(got, *want, 1e-5, 1e-6));
    // Unused in every step: its gradient is exactly zero (it was zeroed, not left undefined).
    for (const auto& [name, var] : ddp->module().NamedParameters()) {
      if (name.rfind("skip.", 0) != 0) continue;
      const Tensor& g = var.grad();
      for (int64_t i = 0; i < g.numel(); ++i) {
        if (g.data<float>()[i] != 0) return absl::InternalError(absl::StrCat(name, " not zero"));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST(ReducerTest, UnusedParameterWithoutFindUnusedFailsAtOnce) {
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.first_bucket_bytes = options.bucket_bytes = 2048;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(
                                   std::make_shared<SkipModel>(16, false), &comm, options));
    return ForwardBackward(*ddp, rank * 6, rank * 6 + 6);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // far below the 120 s collective timeout
  for (const absl::Status& s : statuses) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("skip.weight"));
    EXPECT_THAT(s.message(), HasSubstr("skip.bias"));
    EXPECT_THAT(s.message(), HasSubstr("set find_unused_parameters=true"));
  }
}

TEST(ReducerTest, RanksDisagreeingOnUsedParametersFail) {
  auto group = Group::Create(3, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.find_unused_parameters = true;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(
                                   std::make_shared<SkipModel>(16, rank == 1), &comm, options));
    return ForwardBackward(*ddp, rank * 4, rank * 4 + 4);
  });
  for (const absl::Status& s : statuses) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("'skip.weight' (used on ranks 1, unused on ranks 0,2)"));
    EXPECT_THAT(s.message(), HasSubstr("'skip.bias'"));
    EXPECT_THAT(s.message(), Not(HasSubstr("fc1")));
  }
}

TEST(ReducerTest, NoSyncAccumulatesThenReducesTheSum) {
  // Two micro-batches of 3 rows per rank (sync off, then on) sum two means of 3 rows; averaged
  // over 2 ranks that is twice the mean gradient of all 12 rows.
  const std::map<std::string, Tensor> want = ReferenceGrads(Mlp(0));
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.first_bucket_bytes = options.bucket_bytes = 4096;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm, options));
    ddp->set_sync(false);
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 3));
    if (ddp->reducer().stats().bytes_reduced != 0) {
      return absl::InternalError("a no-sync backward communicated");
    }
    ddp->set_sync(true);
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6 + 3, rank * 6 + 6));
    ASSIGN_OR_RETURN(auto got, Grads(ddp->module()));
    std::map<std::string, Tensor> twice;
    for (const auto& [name, g] : want) {
      ASSIGN_OR_RETURN(twice[name], g.Clone());
      for (int64_t i = 0; i < g.numel(); ++i) twice[name].data<float>()[i] *= 2;
    }
    return CompareParams(got, twice, 1e-5, 1e-7);
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST(ReducerTest, DifferentModelOnOneRankFailsEverywhere) {
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    return DistributedDataParallel::Create(std::make_shared<SkipModel>(rank == 1 ? 17 : 16, true),
                                           &comm)
        .status();
  });
  for (const absl::Status& s : statuses) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("entry 0: rank 0 has parameter fc1.weight float32 [16, "
                                       "784], rank 1 has parameter fc1.weight float32 [17, 784]"));
  }
}

TEST(ReducerTest, RebuildKeepsGradientsAndLayoutAgrees) {
  const std::map<std::string, Tensor> want = ReferenceGrads(Mlp(0));
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::vector<std::vector<std::string>>> layouts(2);
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.first_bucket_bytes = options.bucket_bytes = 4096;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm, options));
    if (ddp->reducer().stats().rebuilt) return absl::InternalError("rebuilt before any step");
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 6));
    if (!ddp->reducer().stats().rebuilt) return absl::InternalError("not rebuilt");
    layouts[rank] = ddp->reducer().BucketNames();
    // Read after the rebuild: the gradients now live in the new buckets.
    ASSIGN_OR_RETURN(auto got, Grads(ddp->module()));
    RETURN_IF_ERROR(CompareParams(got, want, 1e-5, 1e-7));
    // Accumulation still lands in the (new) buckets and is reduced: a second identical
    // iteration without ZeroGrad doubles every gradient.
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 6));
    ASSIGN_OR_RETURN(auto again, Grads(ddp->module()));
    for (auto& [name, g] : got) {
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= 2;
    }
    return CompareParams(again, got, 1e-5, 1e-7);
  });
  ASSERT_EQ(Failures(statuses), "");
  EXPECT_EQ(layouts[0], layouts[1]);
  size_t total = 0;
  for (const auto& bucket : layouts[0]) total += bucket.size();
  EXPECT_EQ(total, 6u);
}

TEST(ReducerTest, StatsAndBucketCallback) {
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.first_bucket_bytes = options.bucket_bytes = 4096;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm, options));
    std::vector<BucketSpan> spans;
    // The callback lives in the reducer, which DistributedDataParallel exposes const only; a
    // Reducer of our own on a second model exercises it.
    std::shared_ptr<nn::Module> model = Mlp(rank);
    ASSIGN_OR_RETURN(auto reducer, Reducer::Create(model->NamedParameters(), &comm, {}));
    reducer->set_bucket_callback([&](const BucketSpan& s) { spans.push_back(s); });
    RETURN_IF_ERROR(reducer->PrepareForBackward());
    Batch batch = MakeBatch(5, 0, 12, rank * 6, rank * 6 + 6);
    ASSIGN_OR_RETURN(auto logits, model->Forward(autograd::Variable(batch.x)));
    ASSIGN_OR_RETURN(auto loss, nn::functional::SoftmaxCrossEntropy(logits, batch.labels));
    RETURN_IF_ERROR(loss.Backward());
    RETURN_IF_ERROR(reducer->FinalizeBackward());
    if (static_cast<int>(spans.size()) != 1 || spans[0].bytes != 4 * model->NumParameters() ||
        spans[0].completed < spans[0].launched) {
      return absl::InternalError(absl::StrCat(spans.size(), " spans"));
    }
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 6));
    const ReducerStats& stats = ddp->reducer().stats();
    if (stats.synced_iterations != 1 || stats.bytes_reduced != 4 * model->NumParameters() ||
        stats.CommWaitFraction() < 0 || stats.CommWaitFraction() > 1 ||
        ddp->reducer().num_buckets() < 4) {
      return absl::InternalError(absl::StrCat("stats ", stats.synced_iterations, " ",
                                              stats.bytes_reduced, " ", stats.CommWaitFraction()));
    }
    if (ddp->reducer().DescribeLayout().find("bucket 0 of ") == std::string::npos) {
      return absl::InternalError(ddp->reducer().DescribeLayout());
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST(ReducerTest, BucketTimeoutNamesTheBucket) {
  auto group = Group::Create(2, Backend::kNative, absl::Seconds(1));
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm));
    if (rank == 1) return absl::OkStatus();  // never joins the gradient allreduce
    return ForwardBackward(*ddp, 0, 6);
  });
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_FALSE(statuses[0].ok());
  EXPECT_THAT(statuses[0].message(), HasSubstr("reducing gradient bucket 0 of 1"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("6 params, 940584 bytes [5.bias, 5.weight"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("op allreduce #"));
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank 0/2"));
}

TEST(ReducerTest, ArgumentAndOrderErrors) {
  auto group = Group::Create(1, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int, Communicator& comm) {
    EXPECT_THAT(ParseCompression("fp8").status().message(), HasSubstr("use none, fp16 or bf16"));
    DdpOptions bad;
    bad.compression = "fp8";
    EXPECT_TRUE(
        absl::IsInvalidArgument(DistributedDataParallel::Create(Mlp(0), &comm, bad).status()));
    EXPECT_TRUE(absl::IsInvalidArgument(DistributedDataParallel::Create(nullptr, &comm).status()));
    bad = {};
    bad.bucket_bytes = -1;  // 0 is the default (Note [Tuned bucket caps]); negative is wrong
    EXPECT_THAT(DistributedDataParallel::Create(Mlp(0), &comm, bad).status().message(),
                HasSubstr("bucket_bytes=-1"));

    autograd::Variable frozen(*Tensor::Zeros({2}, DType::kFloat32), false, "frozen");
    EXPECT_THAT(Reducer::Create({{"frozen", frozen}}, &comm, {}).status().message(),
                HasSubstr("'frozen' must be a defined leaf"));
    autograd::Variable w(*Tensor::Zeros({2}, DType::kFloat32), true, "w");
    EXPECT_THAT(Reducer::Create({{"w", w}, {"w2", w}}, &comm, {}).status().message(),
                HasSubstr("'w2' is passed to the Reducer twice"));
    EXPECT_TRUE(absl::IsInvalidArgument(Reducer::Create({{"w", w}}, nullptr, {}).status()));

    ASSIGN_OR_RETURN(auto reducer, Reducer::Create({{"w", w}}, &comm, {}));
    EXPECT_TRUE(absl::IsFailedPrecondition(reducer->FinalizeBackward()));
    // A backward outside Prepare/Finalize is reported by the next PrepareForBackward.
    std::shared_ptr<nn::Module> model = Mlp(0);
    ASSIGN_OR_RETURN(auto mlp_reducer, Reducer::Create(model->NamedParameters(), &comm, {}));
    Batch batch = MakeBatch(5, 0, 12, 0, 2);
    ASSIGN_OR_RETURN(auto logits, model->Forward(autograd::Variable(batch.x)));
    ASSIGN_OR_RETURN(auto loss, nn::functional::SoftmaxCrossEntropy(logits, batch.labels));
    RETURN_IF_ERROR(loss.Backward());
    const absl::Status s = mlp_reducer->PrepareForBackward();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("outside PrepareForBackward/FinalizeBackward"));
    EXPECT_TRUE(mlp_reducer->PrepareForBackward().ok());  // reported once
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
}

}  // namespace
}  // namespace paddle::ddptest

namespace paddle::ddptest {
namespace {

// Note [Stall inspector]: rank 1 starts its first backward 2.5 s late; rank 0, warned every
// 0.4 s, names rank 1 as not having reached the gradient allreduce, and both still finish.
TEST(ReducerTest, StallInspectorNamesTheMissingRank) {
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  auto store = std::make_shared<HashStore>();
  std::string report;
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.stall_warning = absl::Milliseconds(400);
    options.store = store;
    ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm, options));
    if (rank == 1) absl::SleepFor(absl::Milliseconds(2500));
    RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 6));
    if (rank == 0) report = ddp->reducer().last_stall_report();
    if (rank == 1 && !ddp->reducer().last_stall_report().empty()) {
      return absl::InternalError("the late rank reported a stall itself");
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
  EXPECT_THAT(report, ::testing::HasSubstr("rank 0/2: gradient bucket 0 of 1"));
  EXPECT_THAT(report, ::testing::HasSubstr(
                          "ranks that have not reached this iteration's gradient allreduce: 1 "));
}

// Note [Environment settings]: a malformed PADDLE_STALL_WARNING_S is an error naming it where the
// DDP is created, not the default; an explicit option does not read the variable.
TEST(ReducerTest, MalformedStallWarningVariableIsAnError) {
  unsetenv("PADDLE_STALL_WARNING_S");
  EXPECT_EQ(StallWarningFromEnv().value(), absl::Seconds(60));
  auto group = Group::Create(1, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  for (const char* value : {"nan", "-1", "1m", "inf"}) {
    setenv("PADDLE_STALL_WARNING_S", value, 1);
    absl::StatusOr<absl::Duration> warning = StallWarningFromEnv();
    EXPECT_EQ(warning.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(std::string(warning.status().message()),
                HasSubstr(absl::StrCat("PADDLE_STALL_WARNING_S=\"", value, "\"")));
    std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
      absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
          DistributedDataParallel::Create(Mlp(rank), &comm, DdpOptions());
      if (ddp.ok()) return absl::InternalError("created a DDP despite the malformed variable");
      EXPECT_THAT(std::string(ddp.status().message()), HasSubstr("PADDLE_STALL_WARNING_S"));
      DdpOptions explicit_warning;
      explicit_warning.stall_warning = absl::ZeroDuration();
      return DistributedDataParallel::Create(Mlp(rank), &comm, explicit_warning).status();
    });
    EXPECT_EQ(Failures(statuses), "") << value;
  }
  unsetenv("PADDLE_STALL_WARNING_S");
}

// The inspector's thread looks every quarter interval (15 s by default) but must not hold up the
// reducer's destruction that long; and a prompt iteration leaves no report.
TEST(ReducerTest, StallInspectorThreadStopsAtOnce) {
  auto group = Group::Create(2, Backend::kNative);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    DdpOptions options;
    options.stall_warning = absl::Seconds(60);
    absl::Time destroyed;
    {
      ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(Mlp(rank), &comm, options));
      RETURN_IF_ERROR(ForwardBackward(*ddp, rank * 6, rank * 6 + 6));
      if (!ddp->reducer().last_stall_report().empty()) {
        return absl::InternalError(ddp->reducer().last_stall_report());
      }
      destroyed = absl::Now();
    }
    const absl::Duration took = absl::Now() - destroyed;
    if (took > absl::Seconds(5)) {
      return absl::InternalError(
          absl::StrCat("destroying the DDP took ", absl::FormatDuration(took)));
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
}

}  // namespace
}  // namespace paddle::ddptest
