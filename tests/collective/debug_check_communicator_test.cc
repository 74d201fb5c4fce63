// The debug-check layer (paddle/collective/backends/common/debug_check_communicator.h) that
// Communicator::Create puts over every backend: the same disagreement gives the same message on
// native and Gloo, a rank's own argument error fails the others and leaves the backends in step,
// Split is checked and its group wrapped, the ranks must agree on the mode, Abort reaches a peer
// blocked in a check, and with the checks off no layer is in place. Ranks are threads.
#include "paddle/collective/backends/common/debug_check_communicator.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::AllOk;
using commtest::CommGroup;
using commtest::CompareElements;
using commtest::DescribeFailures;
using commtest::ExpectedReduction;
using commtest::GroupOptions;
using commtest::MakeReductionInput;
using commtest::NewTensor;
using testing::HasSubstr;

std::unique_ptr<CommGroup> MakeGroup(Backend backend, int n, bool debug_checks) {
  GroupOptions options;
  options.backend = backend;
  options.world_size = n;
  options.debug_checks = debug_checks;
  absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

// An allreduce of `count` float32 on every rank, checked: the group still works.
absl::Status CheckedAllreduce(Communicator& comm, int rank, int64_t count, uint64_t seed) {
  Tensor t = MakeReductionInput(count, DType::kFloat32, seed, rank, ReduceOp::kSum);
  std::shared_ptr<Work> work = comm.Allreduce(t, ReduceOp::kSum);
  RETURN_IF_ERROR(work->Wait());
  return CompareElements(
      t, ExpectedReduction(0, count, DType::kFloat32, comm.world_size(), seed, ReduceOp::kSum), 0,
      work->Describe());
}

bool Wrapped(Communicator& comm) { return dynamic_cast<DebugCheckCommunicator*>(&comm) != nullptr; }

// The message without the time waited, which differs from run to run.
std::string WithoutTimes(absl::string_view message) {
  static const std::regex waited("waited [^\\],]*");
  return std::regex_replace(std::string(message), waited, "waited T");
}

class DebugCheckTest : public testing::TestWithParam<Backend> {};

// Rank 2 passes 10 elements where ranks 0 and 1 pass 12: every rank fails with the listing, the
// group still works, and the message is word for word the native backend's on every backend.
TEST(DebugCheckLayerTest, SameDisagreementSameMessageOnNativeAndGloo) {
  std::map<Backend, std::vector<std::string>> messages;
  for (Backend backend : {Backend::kNative, Backend::kGloo}) {
    SCOPED_TRACE(BackendName(backend));
    std::unique_ptr<CommGroup> group = MakeGroup(backend, 3, /*debug_checks=*/true);
    ASSERT_NE(group, nullptr);
    std::vector<std::string>& got = messages[backend];
    got.resize(3);
    const absl::Time start = absl::Now();
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));  // #1 agrees
      const absl::Status s =
          comm.Allreduce(NewTensor(rank == 2 ? 10 : 12, DType::kFloat32), ReduceOp::kSum)->Wait();
      if (!absl::IsInvalidArgument(s)) {
        return absl::InternalError(absl::StrCat("want kInvalidArgument, got ", s.ToString()));
      }
      got[rank] = std::string(s.message());
      return CheckedAllreduce(comm, rank, 10, 2);  // the backend is still in step
    });
    EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
    EXPECT_LT(absl::Now() - start, absl::Seconds(60));
    for (int rank = 0; rank < 3; ++rank) {
      const std::string mine = rank == 2 ? "(float32 x 10, sum)" : "(float32 x 12, sum)";
      EXPECT_THAT(got[rank],
                  HasSubstr(absl::StrCat("collective debug check before allreduce #2 ", mine,
                                         ": the ranks did not make the same call: "
                                         "rank 2 called allreduce #2 (float32 x "
                                         "10, sum); ranks 0, 1 called allreduce "
                                         "#2 (float32 x 12, sum)")));
      EXPECT_THAT(got[rank], HasSubstr(absl::StrCat("[rank ", rank, "/3, op allreduce #2")));
      EXPECT_THAT(got[rank], HasSubstr("PADDLE_DEBUG_CHECKS"));
    }
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(WithoutTimes(messages[Backend::kNative][rank]),
              WithoutTimes(messages[Backend::kGloo][rank]))
        << "rank " << rank;
  }
}

// Rank 1 asks for an integer average, which its own checks reject: it gets its own argument
// error, the others the listing, and no backend saw the call, so their always-on stamps (which
// carry sequence numbers) still agree on the next call.
TEST_P(DebugCheckTest, OwnArgumentErrorFailsTheOthersAndKeepsBackendsInStep) {
  std::unique_ptr<CommGroup> group = MakeGroup(GetParam(), 3, /*debug_checks=*/true);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));
    const ReduceOp op = rank == 1 ? ReduceOp::kAvg : ReduceOp::kSum;
    const absl::Status s = comm.Allreduce(NewTensor(5, DType::kInt32), op)->Wait();
    if (!absl::IsInvalidArgument(s)) {
      return absl::InternalError(absl::StrCat("want kInvalidArgument, got ", s.ToString()));
    }
    std::vector<std::string> want = {
        "rank 1 called allreduce #2 (int32 x 5, avg, arguments "
        "rejected by its own checks)",
        "ranks 0, 2 called allreduce #2 (int32 x 5, sum)"};
    if (rank == 1) want = {"allreduce #2 (int32 x 5, avg)", "int32", "[rank 1/3, op allreduce #2]"};
    for (const std::string& w : want) {
      if (!absl::StrContains(s.message(), w)) {
        return absl::InternalError(absl::StrCat("\"", w, "\" missing from ", s.ToString()));
      }
    }
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 2));
    return CheckedAllreduce(comm, rank, 33, 3);
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// Split is checked like a collective (a disagreement fails it on every rank and splits
// nothing), and the new group gets a layer and a check channel of its own.
TEST_P(DebugCheckTest, SplitIsCheckedAndItsGroupWrapped) {
  std::unique_ptr<CommGroup> group = MakeGroup(GetParam(), 3, /*debug_checks=*/true);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    absl::StatusOr<std::unique_ptr<Communicator>> bad =
        comm.Split(rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2});
    if (!absl::IsInvalidArgument(bad.status()) ||
        !absl::StrContains(bad.status().message(), "rank 0 called split #1 (2 ranks")) {
      return absl::InternalError(absl::StrCat("mismatched split: ", bad.status().ToString()));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split({0, 2}));
    if (rank == 1 && sub != nullptr) return absl::InternalError("rank 1 is in the split group");
    if (rank != 1) {
      if (sub == nullptr || !Wrapped(*sub) || sub->backend() != GetParam()) {
        return absl::InternalError("the split group has no debug-check layer");
      }
      RETURN_IF_ERROR(CheckedAllreduce(*sub, sub->rank(), 7, 4));
      // Ranks 0 and 2 of the group are ranks 0 and 1 of the new one.
      const absl::Status s = sub->Broadcast(NewTensor(rank == 0 ? 3 : 4, DType::kInt64), 0)->Wait();
      if (!absl::IsInvalidArgument(s) ||
          !absl::StrContains(s.message(), "rank 1 called broadcast #") ||
          !absl::StrContains(s.message(), "(int64 x 4, root 0)")) {
        return absl::InternalError(absl::StrCat("mismatch in the split group: ", s.ToString()));
      }
      RETURN_IF_ERROR(CheckedAllreduce(*sub, sub->rank(), 9, 5));
    }
    return CheckedAllreduce(comm, rank, 11, 6);
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// A rank without the checks would never join the others' checks: creation fails at once on both
// sides, each naming the other's mode.
TEST_P(DebugCheckTest, RanksMustAgreeOnTheMode) {
  GroupOptions options;
  options.backend = GetParam();
  options.world_size = 2;
  options.debug_checks_per_rank = {true, false};
  const absl::Time start = absl::Now();
  auto results = CommGroup::CreateEach(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  ASSERT_FALSE(results[0].ok());
  ASSERT_FALSE(results[1].ok());
  EXPECT_TRUE(absl::IsInvalidArgument(results[0].status())) << results[0].status();
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("communicator of rank 0/2: rank 1 runs with debug_checks=0 but this rank "
                        "with debug_checks=1"));
  EXPECT_THAT(results[1].status().message(),
              HasSubstr("communicator of rank 1/2: rank 0 runs with debug_checks=1 but this rank "
                        "with debug_checks=0"));
}

// Abort on one rank closes its check channel: a peer blocked in a check fails at once (not at its
// two-minute timeout), naming the rank, and the aborted rank's next call fails at once.
TEST_P(DebugCheckTest, AbortReachesAPeerBlockedInACheck) {
  std::unique_ptr<CommGroup> group = MakeGroup(GetParam(), 2, /*debug_checks=*/true);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));
    const absl::Time start = absl::Now();
    if (rank == 0) {
      absl::SleepFor(absl::Milliseconds(300));  // rank 1 is in the check by then
      comm.Abort(absl::CancelledError("test abort"));
      const absl::Status s = comm.Allreduce(NewTensor(4, DType::kFloat32), ReduceOp::kSum)->Wait();
      if (s.ok() || !absl::StrContains(s.message(), "test abort")) {
        return absl::InternalError(absl::StrCat("after Abort: ", s.ToString()));
      }
    } else {
      const absl::Status s = comm.Allreduce(NewTensor(4, DType::kFloat32), ReduceOp::kSum)->Wait();
      if (s.ok() || absl::IsInvalidArgument(s) || !absl::StrContains(s.message(), "rank 0")) {
        return absl::InternalError(absl::StrCat("peer of the aborted rank: ", s.ToString()));
      }
    }
    if (absl::Now() - start > absl::Seconds(30)) {
      return absl::InternalError(absl::StrCat("took ", absl::FormatDuration(absl::Now() - start)));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// With the checks off no layer is in place (the backend itself is returned); with them on,
// from the options or from PADDLE_DEBUG_CHECKS, every rank's communicator has one, except in a
// world of one, where there is no one to disagree with.
TEST_P(DebugCheckTest, LayerOnlyWhenOn) {
  {
    std::unique_ptr<CommGroup> off = MakeGroup(GetParam(), 2, /*debug_checks=*/false);
    ASSERT_NE(off, nullptr);
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(Wrapped(off->comm(r))) << "rank " << r;
  }
  {
    std::unique_ptr<CommGroup> on = MakeGroup(GetParam(), 2, /*debug_checks=*/true);
    ASSERT_NE(on, nullptr);
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(Wrapped(on->comm(r))) << "rank " << r;
      EXPECT_EQ(on->comm(r).backend(), GetParam());
      EXPECT_EQ(on->comm(r).rank(), r);
      EXPECT_EQ(on->comm(r).world_size(), 2);
    }
  }
  {
    setenv("PADDLE_DEBUG_CHECKS", "1", 1);
    std::unique_ptr<CommGroup> env = MakeGroup(GetParam(), 2, /*debug_checks=*/false);
    unsetenv("PADDLE_DEBUG_CHECKS");
    ASSERT_NE(env, nullptr);
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(Wrapped(env->comm(r))) << "rank " << r;
  }
  {
    std::unique_ptr<CommGroup> one = MakeGroup(GetParam(), 1, /*debug_checks=*/true);
    ASSERT_NE(one, nullptr);
    EXPECT_FALSE(Wrapped(one->comm(0)));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DebugCheckTest,
                         testing::Values(Backend::kNative, Backend::kGloo),
                         [](const testing::TestParamInfo<Backend>& info) {
                           return std::string(BackendName(info.param));
                         });

}  // namespace
}  // namespace paddle
