// Note [Ring stamp] (paddle/collective/algorithms/algorithm_context.h): over TCP with 3 and 4
// ranks, ring and tree forced, one rank (each position in turn) calls a collective that differs
// in count, dtype, reduce op, root or operation. Every rank must fail fast, far within the
// timeout, whether or not it exchanges messages with the odd rank in that call, and name it. And
// the ring's pending stamps must cost agreeing calls nothing: long runs of calls in which some
// ranks run ahead of their previous rank, then a clean close. A mismatch in a job's last call is
// returned by Communicator::Shutdown. Ranks are threads.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

constexpr absl::Duration kTimeout = absl::Seconds(30);
// Barriers after the odd call, by the last of which every rank must have failed.
constexpr int kFollowingCalls = 3;

// An allreduce of `count` elements whose every result element is checked.
absl::Status CheckedAllreduce(Communicator& comm, int rank, int64_t count, uint64_t seed) {
  Tensor t = MakeReductionInput(count, DType::kFloat32, seed, rank, ReduceOp::kSum);
  std::shared_ptr<Work> work = comm.Allreduce(t, ReduceOp::kSum);
  RETURN_IF_ERROR(work->Wait());
  return CompareElements(
      t, ExpectedReduction(0, count, DType::kFloat32, comm.world_size(), seed, ReduceOp::kSum), 0,
      work->Describe());
}

std::unique_ptr<CommGroup> TcpGroup(int world_size, const char* algorithm) {
  GroupOptions options;
  options.world_size = world_size;
  options.transport = "tcp";
  options.algorithm = algorithm;
  options.timeout = kTimeout;
  absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

// What the odd rank does differently. kBroadcast: it broadcasts from its own buffer while the
// others allreduce; kBroadcastFromNext: it waits for a broadcast from the next rank, which, like
// the others, allreduces (the ranks then wait on each other in a cycle that crosses no pair of
// mismatched messages); kRoot: everyone broadcasts, the odd rank names another root.
enum class Odd { kCount, kDType, kReduceOp, kRoot, kBroadcast, kBroadcastFromNext };
constexpr Odd kAllOdd[] = {Odd::kCount, Odd::kDType,     Odd::kReduceOp,
                           Odd::kRoot,  Odd::kBroadcast, Odd::kBroadcastFromNext};
const char* const kOddNames[] = {"count", "dtype",     "reduce_op",
                                 "root",  "broadcast", "broadcast_from_next"};

struct FailFastCase {
  const char* algorithm;
  int world_size;
  int odd_rank;
  Odd odd;
};

std::vector<FailFastCase> FailFastCases() {
  std::vector<FailFastCase> cases;
  for (const char* algorithm : {"ring", "tree"}) {
    for (int n : {3, 4}) {
      for (int odd_rank = 0; odd_rank < n; ++odd_rank) {
        for (Odd odd : kAllOdd) cases.push_back({algorithm, n, odd_rank, odd});
      }
    }
  }
  return cases;
}

// The odd rank's call and everyone else's, as in Odd.
absl::Status OddCall(const FailFastCase& c, int rank, Communicator& comm) {
  const bool odd = rank == c.odd_rank;
  switch (c.odd) {
    case Odd::kCount:
      return comm.Allreduce(NewTensor(odd ? 101 : 100, DType::kFloat32), ReduceOp::kSum)->Wait();
    case Odd::kDType:
      return comm.Allreduce(NewTensor(64, odd ? DType::kInt32 : DType::kFloat32), ReduceOp::kSum)
          ->Wait();
    case Odd::kReduceOp:
      return comm.Allreduce(NewTensor(64, DType::kFloat32), odd ? ReduceOp::kMax : ReduceOp::kSum)
          ->Wait();
    case Odd::kRoot: {
      const int root = (c.odd_rank + 1) % c.world_size;
      return comm.Broadcast(NewTensor(100, DType::kFloat32), odd ? c.odd_rank : root)->Wait();
    }
    case Odd::kBroadcast:
    case Odd::kBroadcastFromNext: {
      Tensor t = NewTensor(100, DType::kFloat32);
      const int root = c.odd == Odd::kBroadcast ? c.odd_rank : (c.odd_rank + 1) % c.world_size;
      return (odd ? comm.Broadcast(t, root) : comm.Allreduce(t, ReduceOp::kSum))->Wait();
    }
  }
  return absl::InternalError("unknown case");
}

class FailFastTest : public testing::TestWithParam<FailFastCase> {};
INSTANTIATE_TEST_SUITE_P(Tcp, FailFastTest, testing::ValuesIn(FailFastCases()),
                         [](const testing::TestParamInfo<FailFastCase>& info) {
                           return absl::StrCat(info.param.algorithm, "_n", info.param.world_size,
                                               "_rank", info.param.odd_rank, "_",
                                               kOddNames[static_cast<int>(info.param.odd)]);
                         });

TEST_P(FailFastTest, EveryRankFailsNamingTheOddRank) {
  const FailFastCase& c = GetParam();
  std::unique_ptr<CommGroup> group = TcpGroup(c.world_size, c.algorithm);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Duration> took(static_cast<size_t>(c.world_size));
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    const absl::Time start = absl::Now();
    // A rank still finishing this agreeing call when another finds the mismatch in the next one
    // fails it, with that cause.
    absl::Status s = CheckedAllreduce(comm, rank, 10, 1);
    if (s.ok()) s = OddCall(c, rank, comm);
    // A rank may complete the call (its previous rank's stamp still on its way, Note [Ring
    // stamp]); one of the next calls must fail then: the first finds the stamp if it arrived, a
    // call that receives from the previous rank finds it (it came in before that rank's
    // messages), and a rank that finished the call before another found the mismatch fails by
    // that rank's abort in the call after.
    for (int i = 0; i < kFollowingCalls && s.ok(); ++i) s = comm.Barrier()->Wait();
    took[static_cast<size_t>(rank)] = absl::Now() - start;
    if (s.ok()) return absl::InternalError("the mismatch went unnoticed on this rank");
    // The mismatch, found by the stamps or (a message of the wrong size arrived before its
    // receiver compared the stamp) by the transport, passed on to the others as the cause; both
    // name the odd rank: the stamps' "rank 2 called", the transport's "peer 2 (address) sent",
    // or the context "[rank 2/4" of the odd rank's own report.
    const bool mismatch = absl::StrContains(s.message(), "called different collectives") ||
                          absl::StrContains(s.message(), "size mismatch");
    bool named = false;
    for (const std::string& name :
         {absl::StrCat("rank ", c.odd_rank, " called "), absl::StrCat("peer ", c.odd_rank, " ("),
          absl::StrCat("[rank ", c.odd_rank, "/")}) {
      named = named || absl::StrContains(s.message(), name);
    }
    if (!mismatch || !named) {
      return absl::InternalError(
          absl::StrCat("want the mismatch naming rank ", c.odd_rank, ", got: ", s.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
  for (int rank = 0; rank < c.world_size; ++rank) {
    EXPECT_LT(took[static_cast<size_t>(rank)], kTimeout / 6) << "rank " << rank;
  }
}

// Note [Ring stamp]: a rank whose call moved no data (an empty tensor among full ones) completes
// it at once and then idles, calling nothing for a while. Its stamp is the only sign of the
// mismatch, and the idle flush must send it: the ranks waiting for its data fail long before its
// next call, naming it.
TEST(RingStampTest, IdleRankAfterAnOddEmptyCallIsNamedWhileItIdles) {
  constexpr absl::Duration kIdle = absl::Seconds(3);
  for (const char* algorithm : {"ring", "tree"}) {
    std::unique_ptr<CommGroup> group = TcpGroup(3, algorithm);
    ASSERT_NE(group, nullptr);
    std::vector<absl::Duration> took(3);
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));
      const absl::Time start = absl::Now();
      const int64_t count = rank == 2 ? 0 : 100;
      absl::Status s = comm.Allreduce(NewTensor(count, DType::kFloat32), ReduceOp::kSum)->Wait();
      took[static_cast<size_t>(rank)] = absl::Now() - start;
      if (rank == 2) {
        if (!s.ok())
          return absl::InternalError(absl::StrCat("the empty call failed: ", s.ToString()));
        absl::SleepFor(kIdle);  // no call on the communicator meanwhile
        s = comm.Barrier()->Wait();
        if (s.ok()) return absl::InternalError("the mismatch went unnoticed on rank 2");
        return absl::OkStatus();
      }
      if (s.ok()) return absl::InternalError("the mismatch went unnoticed on this rank");
      if (!absl::StrContains(s.message(), "rank 2 called allreduce #2 (float32 x 0, sum)") &&
          !absl::StrContains(s.message(), "called different collectives")) {
        return absl::InternalError(absl::StrCat("want the mismatch, got: ", s.ToString()));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(AllOk(statuses)) << algorithm << ": " << DescribeFailures(statuses);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(took[static_cast<size_t>(rank)], kIdle / 2) << algorithm << ", rank " << rank;
    }
  }
}

// Many tree broadcasts in a row: the root and the ranks near it finish each call long before
// their previous rank (a leaf) has sent its ring stamp, more calls ahead than the pending bound
// (kMaxPendingRingStamps) allows at times; every result must be right, and the group must close
// without an error on any rank (a rank that closed with a stamp still on its way to it would
// fail its previous rank's send).
TEST(RingStampTest, RanksRunningAheadStayInStepAndCloseCleanly) {
  for (int n : {3, 4}) {
    std::unique_ptr<CommGroup> group = TcpGroup(n, "tree");
    ASSERT_NE(group, nullptr);
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      for (int i = 0; i < 600; ++i) {
        Tensor t = NewTensor(4, DType::kInt32);
        int32_t* v = static_cast<int32_t*>(t.data());
        for (int k = 0; k < 4; ++k) v[k] = rank == 0 ? i * 4 + k : -1;
        RETURN_IF_ERROR(comm.Broadcast(t, 0)->Wait());
        for (int k = 0; k < 4; ++k) {
          if (v[k] != i * 4 + k) {
            return absl::InternalError(absl::StrCat("broadcast ", i, " element ", k, " is ", v[k]));
          }
        }
      }
      // Empty calls move nothing but their ring stamps.
      for (int i = 0; i < 20; ++i) {
        RETURN_IF_ERROR(comm.Allreduce(NewTensor(0, DType::kFloat32), ReduceOp::kSum)->Wait());
      }
      return CheckedAllreduce(comm, rank, 1000, 3);
    });
    EXPECT_TRUE(AllOk(statuses)) << "n=" << n << ": " << DescribeFailures(statuses);
    const absl::Time start = absl::Now();
    group->Destroy();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "n=" << n;
  }
}

// A job's last call may complete on every rank before its ring stamp is compared (Note [Ring
// stamp]): roots that differ in a ring broadcast, where every rank receives only from a rank that
// agrees with it, or from none. No next call finds the mismatch; Shutdown must return it on the
// ranks that compare the odd rank's stamps (it and its next rank; a rank that found it first may
// have failed the call itself) instead of leaving it to a log line.
TEST(RingStampTest, ShutdownReturnsTheLastCallsMismatch) {
  for (int odd_rank = 0; odd_rank < 3; ++odd_rank) {
    std::unique_ptr<CommGroup> group = TcpGroup(3, "ring");
    ASSERT_NE(group, nullptr);
    const FailFastCase c{"ring", 3, odd_rank, Odd::kRoot};
    std::vector<absl::Status> shutdowns(3);
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));
      const absl::Status call = OddCall(c, rank, comm);
      const absl::Status shutdown = comm.Shutdown();
      shutdowns[static_cast<size_t>(rank)] = shutdown;
      if (absl::Now() - start > kTimeout / 6) {
        return absl::InternalError(
            absl::StrCat("took ", absl::FormatDuration(absl::Now() - start)));
      }
      if (comm.Shutdown() != shutdown) {
        return absl::InternalError(
            absl::StrCat("a second Shutdown returned another status than ", shutdown.ToString()));
      }
      if (!call.ok() && shutdown.ok()) {
        return absl::InternalError(
            absl::StrCat("Shutdown is OK after the call failed with ", call.ToString()));
      }
      const absl::Status after = comm.Barrier()->Wait();
      if (!absl::IsFailedPrecondition(after)) {
        return absl::InternalError(absl::StrCat("a call after Shutdown: ", after.ToString()));
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(AllOk(statuses)) << "odd rank " << odd_rank << ": " << DescribeFailures(statuses);
    int named = 0;
    for (const absl::Status& s : shutdowns) {
      if (absl::IsInvalidArgument(s) &&
          absl::StrContains(s.message(), "called different collectives") &&
          absl::StrContains(s.message(), absl::StrCat("rank ", odd_rank, " called "))) {
        ++named;
      }
    }
    EXPECT_GE(named, 1) << "odd rank " << odd_rank << ": " << DescribeFailures(shutdowns);
  }
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  setenv("PADDLE_SOCKET_IFNAME", "127.0.0.1", 1);  // tests never leave the host
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
