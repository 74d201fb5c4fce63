// The always-on agreement check (Note [Agreement check] in paddle/collective/call_stamp.h), run
// over every path a collective takes: the native backend's node workspace, its shared-memory and
// TCP transports, and the Gloo backend. Ranks are threads; communicator_process_test and
// gloo_communicator_test repeat the main cases across real processes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/call_stamp.h"
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

struct Path {
  const char* name;
  Backend backend;
  const char* transport;
  const char* algorithm;  // forcing one keeps the native backend off the node workspace
};

const Path kPaths[] = {
    {"workspace", Backend::kNative, "auto", ""},
    {"shm_transport", Backend::kNative, "auto", "ring"},
    {"tcp", Backend::kNative, "tcp", ""},
    {"tcp_tree", Backend::kNative, "tcp", "tree"},
    {"gloo", Backend::kGloo, "auto", ""},
};

// An allreduce of `count` elements whose every result element is checked.
absl::Status CheckedAllreduce(Communicator& comm, int rank, int64_t count, uint64_t seed) {
  Tensor t = MakeReductionInput(count, DType::kFloat32, seed, rank, ReduceOp::kSum);
  std::shared_ptr<Work> work = comm.Allreduce(t, ReduceOp::kSum);
  RETURN_IF_ERROR(work->Wait());
  return CompareElements(
      t, ExpectedReduction(0, count, DType::kFloat32, comm.world_size(), seed, ReduceOp::kSum), 0,
      work->Describe());
}

class AgreementTest : public testing::TestWithParam<Path> {
 protected:
  std::unique_ptr<CommGroup> MakeGroup() const {
    GroupOptions options;
    options.backend = GetParam().backend;
    options.world_size = 3;
    options.transport = GetParam().transport;
    options.algorithm = GetParam().algorithm;
    absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::move(*group) : nullptr;
  }

  // On a fresh group of 3: one agreeing allreduce, then `call`. Every rank must fail, within 60 s
  // although the timeout is far longer (no rank waits for its timeout): the call itself, or, for
  // a rank that met no mismatched data and completed it (a broadcast's root), the barrier that
  // follows. At least one rank fails the call with kInvalidArgument holding every string of
  // `want` (both calls); every other failure names a mismatch too: the stamps', or the one the
  // transport found first (a size mismatch poisons the transport before the stamps are compared),
  // passed on as the poison's cause. Gloo compares every rank's stamp before anything moves, so
  // there every rank fails the call alike and the group keeps working, unless only a pair of
  // ranks can see the mismatch (`gloo_pair_only`: alltoallv counts), which poisons.
  void ExpectMismatchFails(const std::function<std::shared_ptr<Work>(int, Communicator&)>& call,
                           const std::vector<std::string>& want, bool gloo_pair_only = false) {
    std::unique_ptr<CommGroup> group = MakeGroup();
    ASSERT_NE(group, nullptr);
    const bool gloo = GetParam().backend == Backend::kGloo && !gloo_pair_only;
    const absl::Time start = absl::Now();
    std::vector<absl::Status> called(3);
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      // A rank still finishing this agreeing call when another finds the mismatch in the next
      // one fails it, with that cause.
      absl::Status failure = CheckedAllreduce(comm, rank, 10, 1);
      if (failure.ok()) {
        called[rank] = call(rank, comm)->Wait();
        failure = called[rank];
      }
      if (failure.ok()) {
        if (gloo) return absl::InternalError("a Gloo rank missed the mismatch");
        failure = comm.Barrier()->Wait();
        if (failure.ok()) return absl::InternalError("the mismatch went unnoticed on this rank");
      }
      if (!absl::StrContains(failure.message(), "called different collectives") &&
          !absl::StrContains(failure.message(), "size mismatch")) {
        return absl::InternalError(absl::StrCat("no mismatch named in ", failure.ToString()));
      }
      if (gloo) {
        if (!absl::IsInvalidArgument(failure)) {
          return absl::InternalError(absl::StrCat("want kInvalidArgument: ", failure.ToString()));
        }
        return CheckedAllreduce(comm, rank, 10, 2);  // nothing moved: the group still works
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
    int named = 0;
    for (const absl::Status& s : called) {
      bool all = absl::IsInvalidArgument(s);
      for (const std::string& w : want) all = all && absl::StrContains(s.message(), w);
      named += all ? 1 : 0;
    }
    EXPECT_GE(named, gloo ? 3 : 1) << DescribeFailures(called);
    EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  }
};

INSTANTIATE_TEST_SUITE_P(Paths, AgreementTest, testing::ValuesIn(kPaths),
                         [](const testing::TestParamInfo<Path>& info) {
                           return std::string(info.param.name);
                         });

TEST_P(AgreementTest, MatchingCallsPass) {
  std::unique_ptr<CommGroup> group = MakeGroup();
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    for (int64_t count : {1, 100, 100003}) {
      RETURN_IF_ERROR(CheckedAllreduce(comm, rank, count, static_cast<uint64_t>(count)));
    }
    RETURN_IF_ERROR(comm.Broadcast(NewTensor(1000, DType::kInt64), 2)->Wait());
    RETURN_IF_ERROR(comm.Reduce(NewTensor(1000, DType::kInt64), 1, ReduceOp::kMax)->Wait());
    RETURN_IF_ERROR(comm.Barrier()->Wait());
    // Uneven splits: rank r sends r + j + 1 elements to rank j, which expects as many.
    const std::vector<int64_t> send = {rank + 1, rank + 2, rank + 3};
    const std::vector<int64_t> recv = {rank + 1, rank + 2, rank + 3};
    RETURN_IF_ERROR(comm.Alltoallv(NewTensor(3 * rank + 6, DType::kFloat32),
                                   NewTensor(3 * rank + 6, DType::kFloat32), send, recv)
                        ->Wait());
    const std::vector<int64_t> counts = {5, 0, 7};
    return comm
        .Allgatherv(NewTensor(counts[rank], DType::kUInt8), NewTensor(12, DType::kUInt8), counts)
        ->Wait();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// The case of the hardening issue: with the default settings rank 2's last element came back
// unreduced (node workspace), or Gloo aborted the process.
TEST_P(AgreementTest, CountMismatchIsAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(rank == 2 ? 101 : 100, DType::kFloat32), ReduceOp::kSum);
      },
      {"called different collectives", "allreduce #2 (float32 x 101, sum)",
       "allreduce #2 (float32 x 100, sum)"});
}

// A rank whose tensor is empty moves no data, so no stamp rides with its messages: over a
// transport it compares stamps around the ring (Note [Ring stamp]), on the node workspace it
// takes one round that only compares stamps (StampRound in shm_collectives.cc).
TEST_P(AgreementTest, EmptyTensorAmongFullOnesIsAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(rank == 2 ? 0 : 100, DType::kFloat32), ReduceOp::kSum);
      },
      {"called different collectives", "allreduce #2 (float32 x 0, sum)",
       "allreduce #2 (float32 x 100, sum)"});
}

// Every rank empty: they agree, and the stamps they traded leave the links in step for the next.
TEST_P(AgreementTest, AllEmptyTensorsAgreeAndTheNextCallWorks) {
  std::unique_ptr<CommGroup> group = MakeGroup();
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    for (int i = 0; i < 3; ++i) {
      RETURN_IF_ERROR(comm.Allreduce(NewTensor(0, DType::kFloat32), ReduceOp::kSum)->Wait());
      RETURN_IF_ERROR(comm.Broadcast(NewTensor(0, DType::kInt64), 1)->Wait());
    }
    return CheckedAllreduce(comm, rank, 100, 7);
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

TEST_P(AgreementTest, DTypeOfTheSameSizeIsAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(64, rank == 1 ? DType::kInt32 : DType::kFloat32),
                              ReduceOp::kSum);
      },
      {"allreduce #2 (int32 x 64, sum)", "allreduce #2 (float32 x 64, sum)"});
}

TEST_P(AgreementTest, ReduceOpMismatchIsAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(64, DType::kFloat32),
                              rank == 0 ? ReduceOp::kMax : ReduceOp::kSum);
      },
      {"allreduce #2 (float32 x 64, max)", "allreduce #2 (float32 x 64, sum)"});
}

TEST_P(AgreementTest, DifferentOperationsAreAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        Tensor t = NewTensor(100, DType::kFloat32);
        return rank == 0 ? comm.Broadcast(t, 0) : comm.Allreduce(t, ReduceOp::kSum);
      },
      {"broadcast #2 (float32 x 100, root 0)", "allreduce #2 (float32 x 100, sum)"});
}

TEST_P(AgreementTest, RootMismatchIsAnError) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        return comm.Broadcast(NewTensor(100, DType::kFloat32), rank == 2 ? 1 : 0);
      },
      // Over a transport, rank 2 may hear from its supposed sender only in the next call.
      {"rank 2 called broadcast #2 (float32 x 100, root 1)"});
}

TEST_P(AgreementTest, AlltoallvPairCountsAreChecked) {
  ExpectMismatchFails(
      [](int rank, Communicator& comm) {
        // Every rank sends 2 to every rank, but rank 1 expects 3 from rank 0.
        std::vector<int64_t> send = {2, 2, 2};
        std::vector<int64_t> recv = {2, 2, 2};
        if (rank == 1) recv[0] = 3;
        return comm.Alltoallv(NewTensor(6, DType::kFloat32),
                              NewTensor(rank == 1 ? 7 : 6, DType::kFloat32), send, recv);
      },
      {"alltoallv #2 (float32, sends 2, expects 3)", "alltoallv #2 (float32, sends 2, expects 2)",
       "rank 0 sends 2, rank 1 expects 3"},
      /*gloo_pair_only=*/true);
}

TEST(CallStampTest, DescribesAndComparesCrosswise) {
  CallStamp a;
  a.seq = 7;
  a.kind = static_cast<uint8_t>(OpKind::kAllreduce);
  a.dtype = static_cast<uint8_t>(DType::kFloat32);
  a.op = static_cast<uint8_t>(ReduceOp::kSum);
  a.count = 100;
  EXPECT_EQ(DescribeStamp(a), "allreduce #7 (float32 x 100, sum)");
  CallStamp b = a;
  EXPECT_TRUE(StampsAgree(a, b));
  b.count = 101;
  EXPECT_FALSE(StampsAgree(a, b));
  const absl::Status error = StampMismatchError(0, 3, 2, "", a, b, "test");
  EXPECT_TRUE(absl::IsInvalidArgument(error));
  EXPECT_TRUE(absl::StrContains(error.message(),
                                "rank 0 called allreduce #7 (float32 x 100, sum) "
                                "but rank 2 called allreduce #7 (float32 x 101"))
      << error;
  // Alltoallv: what one sends the other must be what the other expects.
  CallStamp s;
  s.kind = static_cast<uint8_t>(OpKind::kAlltoallv);
  s.send_count = 2;
  s.recv_count = 3;
  CallStamp t = s;
  t.send_count = 3;
  t.recv_count = 2;
  EXPECT_TRUE(StampsAgree(s, t));
  t.send_count = 4;
  EXPECT_FALSE(StampsAgree(s, t));
  EXPECT_EQ(OpKindFromName("reduce_scatter"), OpKind::kReduceScatter);
  EXPECT_FALSE(OpKindFromName("allreduce2").has_value());
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  // Gloo's ranks listen on loopback only (tests never leave the host).
  setenv("PADDLE_SOCKET_IFNAME", "127.0.0.1", 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
