// The Communicator factory and the native backend's behaviour beyond correct results (those are
// in communicator_sweep_test.cc; what every backend shares is communicator_conformance_test.cc):
// names and options, argument errors, Split, Works in flight and Work::Wait timeouts, the
// transports' timeout messages, and the debug checks' native-only cases.
// Ranks are threads; communicator_process_test.cc has real processes.
#include "paddle/collective/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/hash_store.h"
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
using commtest::kGenerous;
using commtest::MakeReductionInput;
using commtest::NewTensor;
using testing::HasSubstr;

std::unique_ptr<CommGroup> MakeGroup(GroupOptions options) {
  absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

std::unique_ptr<CommGroup> MakeGroup(int n) {
  GroupOptions options;
  options.world_size = n;
  return MakeGroup(options);
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

// ---- Factory, names, options ----

TEST(CommunicatorFactoryTest, BackendNamesRoundTrip) {
  for (Backend b : {Backend::kNative, Backend::kGloo, Backend::kNccl}) {
    absl::StatusOr<Backend> parsed = ParseBackend(BackendName(b));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, b);
  }
  EXPECT_EQ(*ParseBackend(" NATIVE "), Backend::kNative);
  absl::StatusOr<Backend> bad = ParseBackend("mpi");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("\"mpi\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("native"));
  EXPECT_THAT(bad.status().message(), HasSubstr("gloo"));
  EXPECT_THAT(bad.status().message(), HasSubstr("nccl"));
}

// backend=nccl needs a GPU: here (no driver, or a --config=nocuda build) Create says so before it
// touches NCCL; on a machine with a GPU a world of one comes up.
TEST(CommunicatorFactoryTest, NcclWithoutAGpuSaysWhy) {
  CommunicatorOptions options;
  options.backend = Backend::kNccl;
  options.store = std::make_shared<HashStore>();
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (comm.ok()) {
    EXPECT_EQ((*comm)->backend(), Backend::kNccl);
    return;
  }
  EXPECT_TRUE(absl::IsFailedPrecondition(comm.status())) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("CUDA"));
}

TEST(CommunicatorFactoryTest, BadOptionsAreNamed) {
  CommunicatorOptions options;
  options.rank = 2;
  options.world_size = 2;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(comm.status()));
  EXPECT_THAT(comm.status().message(), HasSubstr("rank 2 and world size 2"));

  options.rank = 0;
  comm = Communicator::Create(options);  // world size 2 with no store
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("store is null"));

  options.world_size = 1;
  options.transport = "carrier-pigeon";
  comm = Communicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("carrier-pigeon"));
  EXPECT_THAT(comm.status().message(), HasSubstr("tcp"));

  options.transport = "auto";
  options.algorithm = "bubble";
  comm = Communicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("bubble"));
  EXPECT_THAT(comm.status().message(), HasSubstr("ring"));

  options.algorithm = "";
  options.timeout = absl::ZeroDuration();
  comm = Communicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("must be positive"));
}

TEST(CommunicatorFactoryTest, EnvironmentSettingsAreChecked) {
  CommunicatorOptions options;
  options.rank = 0;
  options.world_size = 1;
  setenv("PADDLE_TRANSPORT", "shm9", 1);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  unsetenv("PADDLE_TRANSPORT");
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("PADDLE_TRANSPORT=\"shm9\" is not one of"));

  setenv("PADDLE_ALGO", "fastest", 1);
  comm = Communicator::Create(options);
  unsetenv("PADDLE_ALGO");
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(),
              HasSubstr("PADDLE_ALGO=\"fastest\" is not one of ring, tree, hd"));

  setenv("PADDLE_DEBUG_CHECKS", "maybe", 1);
  comm = Communicator::Create(options);
  unsetenv("PADDLE_DEBUG_CHECKS");
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("PADDLE_DEBUG_CHECKS=\"maybe\" is not a boolean"));

  for (const char* bad : {"100", "1M", "-5"}) {
    setenv("PADDLE_PIECE_BYTES", bad, 1);
    comm = Communicator::Create(options);
    unsetenv("PADDLE_PIECE_BYTES");
    ASSERT_FALSE(comm.ok()) << bad;
    EXPECT_THAT(comm.status().message(),
                HasSubstr(absl::StrCat("PADDLE_PIECE_BYTES=\"", bad,
                                       "\" is not an integer from 4096 to 1073741824")));
  }
}

// A piece size other than the default still gives exact results (pipelined and segmented
// algorithms cut the buffer differently).
TEST(CommunicatorFactoryTest, PieceSizeFromTheEnvironment) {
  setenv("PADDLE_PIECE_BYTES", "4096", 1);
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  unsetenv("PADDLE_PIECE_BYTES");
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 100003, 700 + seed));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

TEST(CommunicatorFactoryTest, SingleRankNeedsNoStore) {
  CommunicatorOptions options;
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->world_size(), 1);
  EXPECT_EQ((*comm)->backend(), Backend::kNative);
  EXPECT_TRUE(CheckedAllreduce(**comm, 0, 33, 3).ok());
}

TEST(CommunicatorFactoryTest, RanksMustAgreeOnSettings) {
  GroupOptions options;
  options.world_size = 3;
  options.debug_checks_per_rank = {false, true, false};
  auto results = CommGroup::CreateEach(options);
  ASSERT_FALSE(results[1].ok());
  EXPECT_TRUE(absl::IsInvalidArgument(results[1].status())) << results[1].status();
  EXPECT_THAT(results[1].status().message(), HasSubstr("debug_checks=0"));
  EXPECT_THAT(results[1].status().message(), HasSubstr("debug_checks=1"));
  EXPECT_THAT(results[1].status().message(), HasSubstr("rank 1/3"));
  EXPECT_TRUE(results[2].ok()) << results[2].status();
}

// ---- Argument errors ----

// Runs `call` on every rank (the same bad call everywhere, so the ranks stay in step), expects
// kInvalidArgument containing every string of `want` on each, then checks the group still works.
void ExpectArgumentError(CommGroup& group,
                         const std::function<std::shared_ptr<Work>(int rank, Communicator&)>& call,
                         const std::vector<std::string>& want) {
  std::vector<absl::Status> statuses = group.Run([&](int rank, Communicator& comm) {
    std::shared_ptr<Work> work = call(rank, comm);
    // Argument errors complete the Work before the call returns.
    if (!work->IsCompleted()) return absl::InternalError("the Work was not completed at once");
    const absl::Status s = work->Wait(absl::ZeroDuration());
    if (!absl::IsInvalidArgument(s)) {
      return absl::InternalError(absl::StrCat("want kInvalidArgument, got ", s.ToString()));
    }
    for (const std::string& w : want) {
      if (!absl::StrContains(s.message(), w)) {
        return absl::InternalError(absl::StrCat("\"", w, "\" missing from ", s.ToString()));
      }
    }
    const std::string rank_text = absl::StrCat("rank ", rank, "/", comm.world_size());
    if (!absl::StrContains(s.message(), rank_text)) {
      return absl::InternalError(absl::StrCat("\"", rank_text, "\" missing from ", s.ToString()));
    }
    return CheckedAllreduce(comm, rank, 5, 11);
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

TEST(CommunicatorArgumentTest, BadCallsFailAtOnceAndLeaveTheGroupWorking) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  ASSERT_NE(group, nullptr);
  CommGroup& g = *group;
  const Tensor f32 = NewTensor(12, DType::kFloat32);

  ExpectArgumentError(
      g,
      [](int, Communicator& c) { return c.Allreduce(NewTensor(4, DType::kInt32), ReduceOp::kAvg); },
      {"allreduce #", "int32"});
  ExpectArgumentError(g, [](int, Communicator& c) { return c.Allreduce(Tensor(), ReduceOp::kSum); },
                      {"undefined"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        Tensor m = *NewTensor(12, DType::kFloat32).View({3, 4});
                        return c.Allreduce(*m.Transpose(0, 1), ReduceOp::kSum);
                      },
                      {"not contiguous", "Contiguous()"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        static float fake[4];
                        Tensor cuda =
                            *Tensor::FromBlob(fake, {4}, DType::kFloat32, Device::Cuda(0));
                        return c.Broadcast(cuda, 0);
                      },
                      {"not in CPU memory", "cuda:0", "nccl"});
  ExpectArgumentError(g, [&](int, Communicator& c) { return c.Broadcast(f32, 3); },
                      {"root 3", "0..2"});
  ExpectArgumentError(g, [&](int, Communicator& c) { return c.Reduce(f32, -1, ReduceOp::kSum); },
                      {"root -1"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.Allgather(NewTensor(4, DType::kFloat32),
                                           NewTensor(11, DType::kFloat32));
                      },
                      {"output", "11 elements", "must have 12", "world size 3"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.Allgather(NewTensor(4, DType::kFloat32),
                                           NewTensor(12, DType::kInt32));
                      },
                      {"input is float32 but output is int32"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        Tensor out = NewTensor(12, DType::kFloat32);
                        return c.Allgather(*out.Slice(0, 1, 5),
                                           out);  // overlaps, but is not this rank's block
                      },
                      {"share memory"});
  ExpectArgumentError(
      g,
      [](int, Communicator& c) {
        return c.Allgatherv(NewTensor(2, DType::kFloat32), NewTensor(6, DType::kFloat32), {2, 2});
      },
      {"counts has 2 entries", "one per rank (3)"});
  ExpectArgumentError(g,
                      [](int rank, Communicator& c) {
                        return c.Allgatherv(NewTensor(2, DType::kFloat32),
                                            NewTensor(7, DType::kFloat32), {2, 2, 2});
                      },
                      {"output", "must have 6", "sum of counts"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.Allgatherv(NewTensor(2, DType::kFloat32),
                                            NewTensor(3, DType::kFloat32), {2, -1, 2});
                      },
                      {"counts[1] is negative"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.ReduceScatter(NewTensor(10, DType::kFloat32),
                                               NewTensor(3, DType::kFloat32), ReduceOp::kSum);
                      },
                      {"input", "10 elements", "must have 9"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.ReduceScatter(NewTensor(9, DType::kUInt8),
                                               NewTensor(3, DType::kUInt8), ReduceOp::kAvg);
                      },
                      {"reduce_scatter #", "uint8"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.Alltoall(NewTensor(10, DType::kFloat32),
                                          NewTensor(10, DType::kFloat32));
                      },
                      {"10 elements, not a multiple of the world size 3"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        Tensor t = NewTensor(9, DType::kFloat32);
                        return c.Alltoall(t, t);
                      },
                      {"share memory"});
  ExpectArgumentError(g,
                      [](int, Communicator& c) {
                        return c.Alltoallv(NewTensor(6, DType::kFloat32),
                                           NewTensor(6, DType::kFloat32), {1, 2, 3}, {1, 2, 2});
                      },
                      {"output", "must have 5", "sum of recv_counts"});
  ExpectArgumentError(g,
                      [](int rank, Communicator& c) {
                        std::vector<int64_t> send = {2, 2, 2};
                        std::vector<int64_t> recv = {2, 2, 2};
                        recv[rank] = 1;
                        send[(rank + 1) % 3] = 3;
                        return c.Alltoallv(NewTensor(7, DType::kFloat32),
                                           NewTensor(5, DType::kFloat32), send, recv);
                      },
                      {"send_counts[", "but recv_counts["});
  ExpectArgumentError(g, [&](int rank, Communicator& c) { return c.Send(f32, rank); },
                      {"cannot send to itself"});
  ExpectArgumentError(g, [&](int, Communicator& c) { return c.Recv(f32, 7, 1); },
                      {"source rank 7"});
}

TEST(CommunicatorArgumentTest, BadSplitListsAreRejected) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  ASSERT_NE(group, nullptr);
  for (const std::vector<int>& ranks :
       std::vector<std::vector<int>>{{}, {0, 0, 1}, {2, 1}, {0, 3}}) {
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      absl::StatusOr<std::unique_ptr<Communicator>> sub = comm.Split(ranks);
      if (sub.ok()) return absl::InternalError("Split accepted a bad list");
      if (!absl::IsInvalidArgument(sub.status())) return sub.status();
      return CheckedAllreduce(comm, rank, 3, 5);
    });
    EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
  }
}

// ---- Split ----

TEST(CommunicatorSplitTest, SubGroupsWorkAndTheParentToo) {
  for (commtest::StoreKind store : {commtest::StoreKind::kDefault, commtest::StoreKind::kTcp}) {
    GroupOptions options;
    options.world_size = 5;
    options.store = store;
    std::unique_ptr<CommGroup> group = MakeGroup(options);
    ASSERT_NE(group, nullptr);
    std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> evens, comm.Split({0, 2, 4}));
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> odds, comm.Split({1, 3}));
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone, comm.Split({rank == 0 ? 0 : 0}));
      Communicator* mine = rank % 2 == 0 ? evens.get() : odds.get();
      Communicator* other = rank % 2 == 0 ? odds.get() : evens.get();
      if (mine == nullptr || other != nullptr) {
        return absl::InternalError("Split gave the wrong ranks a communicator");
      }
      if (mine->rank() != rank / 2 || mine->world_size() != (rank % 2 == 0 ? 3 : 2)) {
        return absl::InternalError(
            absl::StrCat("sub-communicator rank ", mine->rank(), "/", mine->world_size()));
      }
      if ((rank == 0) != (alone != nullptr)) return absl::InternalError("{0} split wrong");
      RETURN_IF_ERROR(CheckedAllreduce(*mine, mine->rank(), 1001, 40 + rank % 2));
      // A split of a split.
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> pair, mine->Split({0, 1}));
      if (pair != nullptr) RETURN_IF_ERROR(CheckedAllreduce(*pair, pair->rank(), 17, 60));
      if (alone != nullptr) RETURN_IF_ERROR(CheckedAllreduce(*alone, 0, 9, 61));
      // The parent goes on, its sequence numbers in step on every rank.
      return CheckedAllreduce(comm, rank, 999, 62);
    });
    EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
  }
}

// ---- Async ----

TEST(CommunicatorAsyncTest, ManyWorksInFlightWaitedInReverse) {
  std::unique_ptr<CommGroup> group = MakeGroup(4);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 24; ++i) {
      const int64_t count = 1 + i * 997;
      tensors.push_back(MakeReductionInput(count, DType::kFloat32, 100 + i, rank, ReduceOp::kSum));
      works.push_back(comm.Allreduce(tensors.back(), ReduceOp::kSum));
    }
    for (size_t i = 1; i < works.size(); ++i) {
      if (works[i]->seq() != works[0]->seq() + i) return absl::InternalError("seq not in order");
    }
    for (int i = 23; i >= 0; --i) {
      RETURN_IF_ERROR(works[i]->Wait());
      if (!works[i]->IsCompleted() || !works[i]->status().ok()) {
        return absl::InternalError("completed Work reports otherwise");
      }
      RETURN_IF_ERROR(CompareElements(
          tensors[i],
          ExpectedReduction(0, tensors[i].numel(), DType::kFloat32, 4, 100 + i, ReduceOp::kSum), 0,
          works[i]->Describe()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// Note [Waiter runs the operation]: threads that wait run operations themselves, yet every rank
// still runs them in call order (sizes differ per operation, so an operation run out of order
// would meet a different one on the other ranks and fail).
TEST(CommunicatorAsyncTest, WaitersOnManyThreadsKeepTheCallOrder) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    constexpr int kOps = 16;
    constexpr int kWaiters = 4;
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < kOps; ++i) {
      tensors.push_back(
          MakeReductionInput(1 + i * 4099, DType::kFloat32, 300 + i, rank, ReduceOp::kSum));
      works.push_back(comm.Allreduce(tensors.back(), ReduceOp::kSum));
    }
    std::vector<absl::Status> waited(kOps);
    std::vector<std::thread> waiters;
    for (int t = 0; t < kWaiters; ++t) {
      // Waiter t takes every kWaiters-th operation, half of them from the back.
      waiters.emplace_back([&, t] {
        for (int k = 0; k < kOps / kWaiters; ++k) {
          const int i = t % 2 == 0 ? t + k * kWaiters : kOps - kWaiters + t - k * kWaiters;
          waited[i] = works[i]->Wait();
        }
      });
    }
    for (std::thread& waiter : waiters) waiter.join();
    for (int i = 0; i < kOps; ++i) {
      RETURN_IF_ERROR(waited[i]);
      RETURN_IF_ERROR(CompareElements(
          tensors[i],
          ExpectedReduction(0, tensors[i].numel(), DType::kFloat32, 3, 300 + i, ReduceOp::kSum), 0,
          works[i]->Describe()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// Note [Lazy queue thread]: after operations whose callers ran them (Wait right after the call),
// an operation nobody waits for must still start on its own: rank 0 does not wait for its last
// allreduce until rank 1 has finished its own, which needs rank 0's to run.
TEST(CommunicatorAsyncTest, UnwaitedOperationStartsAfterWaitedOnes) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  absl::Notification rank1_done;
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    for (int i = 0; i < 20; ++i) RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 1000, 400 + i));
    Tensor last = MakeReductionInput(4096, DType::kFloat32, 500, rank, ReduceOp::kSum);
    std::shared_ptr<Work> work = comm.Allreduce(last, ReduceOp::kSum);
    if (rank == 0) {
      if (!rank1_done.WaitForNotificationWithTimeout(kGenerous)) {
        return absl::InternalError("rank 1 never finished: rank 0's unwaited allreduce never ran");
      }
    }
    RETURN_IF_ERROR(work->Wait());
    if (rank == 1) rank1_done.Notify();
    return CompareElements(
        last, ExpectedReduction(0, 4096, DType::kFloat32, 2, 500, ReduceOp::kSum), 0, "last");
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// Note [Lazy queue thread]: once the queue is lazy, waits that do not run the operation
// themselves (a timeout, or an operation behind an unwaited one) wake the thread; every result is
// still right and in call order.
TEST(CommunicatorAsyncTest, TimedAndOutOfOrderWaitsOnALazyQueue) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    for (int round = 0; round < 10; ++round) {
      // Waited right after the call: the waiter runs them and the queue turns lazy.
      for (int i = 0; i < 5; ++i) RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 700, 600 + i));
      Tensor a = MakeReductionInput(3000, DType::kFloat32, 700 + round, rank, ReduceOp::kSum);
      Tensor b = MakeReductionInput(5000, DType::kFloat32, 800 + round, rank, ReduceOp::kSum);
      std::shared_ptr<Work> first = comm.Allreduce(a, ReduceOp::kSum);
      std::shared_ptr<Work> second = comm.Allreduce(b, ReduceOp::kSum);
      if (round % 2 == 0) {
        RETURN_IF_ERROR(second->Wait(kGenerous));  // behind `first`, with a timeout
      } else {
        RETURN_IF_ERROR(second->Wait());  // behind `first`, which nobody waits for yet
      }
      RETURN_IF_ERROR(first->Wait(kGenerous));
      RETURN_IF_ERROR(CompareElements(
          a, ExpectedReduction(0, 3000, DType::kFloat32, 2, 700 + round, ReduceOp::kSum), 0, "a"));
      RETURN_IF_ERROR(CompareElements(
          b, ExpectedReduction(0, 5000, DType::kFloat32, 2, 800 + round, ReduceOp::kSum), 0, "b"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

TEST(CommunicatorAsyncTest, WaitTimeoutSaysWhetherTheWorkRanOrWaited) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  absl::Notification rank0_checked;
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    Tensor a = MakeReductionInput(10, DType::kFloat32, 1, rank, ReduceOp::kSum);
    Tensor b = MakeReductionInput(10, DType::kFloat32, 2, rank, ReduceOp::kSum);
    if (rank == 1) {
      // Rank 1 joins only once rank 0 has seen its Works wait.
      if (!rank0_checked.WaitForNotificationWithTimeout(kGenerous)) {
        return absl::InternalError("rank 0 never checked");
      }
    }
    std::shared_ptr<Work> first = comm.Allreduce(a, ReduceOp::kSum);
    std::shared_ptr<Work> second = comm.Allreduce(b, ReduceOp::kSum);
    if (rank == 0) {
      EXPECT_EQ(second->Describe(),
                absl::StrCat("allreduce #", second->seq(), " (float32 x 10, sum)"));
      const absl::Status queued = second->Wait(absl::Milliseconds(200));
      EXPECT_TRUE(absl::IsDeadlineExceeded(queued)) << queued;
      EXPECT_THAT(queued.message(), HasSubstr("has not started"));
      EXPECT_THAT(queued.message(), HasSubstr("rank 0/2"));
      const absl::Status running = first->Wait(absl::Milliseconds(200));
      EXPECT_TRUE(absl::IsDeadlineExceeded(running)) << running;
      EXPECT_THAT(running.message(), HasSubstr("has been running for"));
      EXPECT_FALSE(first->IsCompleted());
      EXPECT_TRUE(absl::IsUnavailable(first->status())) << first->status();
      rank0_checked.Notify();
    }
    RETURN_IF_ERROR(second->Wait());
    RETURN_IF_ERROR(first->Wait());
    RETURN_IF_ERROR(CompareElements(
        a, ExpectedReduction(0, 10, DType::kFloat32, 2, 1, ReduceOp::kSum), 0, "a"));
    return CompareElements(b, ExpectedReduction(0, 10, DType::kFloat32, 2, 2, ReduceOp::kSum), 0,
                           "b");
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

// ---- Failures: timeouts, Abort ----

// Rank 2 never calls: ranks 0 and 1 fail within their timeout, naming the operation and its
// sequence number; everything after fails at once with the same cause.
// The rank that timed out first names the missing rank, its address and the hint.
TEST(CommunicatorFailureTest, TimeoutNamesThePeerAndTheHint) {
  // The ring, so the late rank needs a second message from the failed one (with one exchange,
  // as in recursive doubling, the late rank may find everything it needs already delivered).
  GroupOptions options;
  options.world_size = 2;
  options.algorithm = "ring";
  std::unique_ptr<CommGroup> group = MakeGroup(options);
  ASSERT_NE(group, nullptr);
  Tensor t = NewTensor(64, DType::kFloat32);
  std::shared_ptr<Work> work =
      group->comm(0).Allreduce(t, ReduceOp::kSum, CallOptions{absl::Milliseconds(500)});
  const absl::Status s = work->Wait();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("allreduce #1 (float32 x 64, sum)"));
  EXPECT_THAT(s.message(), HasSubstr("rank 0/2"));
  // The ranks share this host, so the shared-memory transport names the peer by its pid.
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("peer 1 (pid ", getpid(), " on ")));
  EXPECT_THAT(s.message(), HasSubstr("128 bytes"));  // one ring block
  EXPECT_THAT(s.message(), HasSubstr("waited 0.5"));
  EXPECT_THAT(s.message(), HasSubstr("PADDLE_TIMEOUT_S"));
  // Rank 1 arrives late: rank 0 has aborted its transport, so rank 1 fails too, at once, instead
  // of waiting for its own timeout.
  const absl::Time start = absl::Now();
  const absl::Status l = group->comm(1).Allreduce(t, ReduceOp::kSum)->Wait(kGenerous);
  EXPECT_FALSE(l.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(l.message(), HasSubstr("rank 1/2"));
  EXPECT_THAT(l.message(), HasSubstr("peer rank 0"));
}

TEST(CommunicatorFailureTest, PointToPointTimeoutNamesThePeer) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  ASSERT_NE(group, nullptr);
  Tensor t = NewTensor(16, DType::kInt64);
  std::shared_ptr<Work> work = group->comm(1).Recv(t, 2, 9, CallOptions{absl::Milliseconds(300)});
  const absl::Status s = work->Wait();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("recv #1 (int64 x 16 from rank 2, tag 9)"));
  // The ranks share this host, so the shared-memory transport names the peer by its pid.
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("peer 2 (pid ", getpid(), " on ")));
  EXPECT_THAT(s.message(), HasSubstr("128 bytes"));
}

// ---- Debug checks ----

// Runs `call` on every rank of a fresh debug-mode group of 3 and expects every rank to fail with
// kInvalidArgument (rank r's message containing every string of want[r]) well before the (long)
// timeout; then the group must still work: a disagreement does not poison it.
void ExpectMismatch(const std::function<std::shared_ptr<Work>(int rank, Communicator&)>& call,
                    const std::map<int, std::vector<std::string>>& want) {
  GroupOptions options;
  options.world_size = 3;
  options.debug_checks = true;
  std::unique_ptr<CommGroup> group = MakeGroup(options);
  ASSERT_NE(group, nullptr);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));  // #1 agrees
    const absl::Status s = call(rank, comm)->Wait();
    if (!absl::IsInvalidArgument(s)) {
      return absl::InternalError(absl::StrCat("want kInvalidArgument, got ", s.ToString()));
    }
    const auto it = want.find(rank);
    for (const std::string& w : it == want.end() ? std::vector<std::string>() : it->second) {
      if (!absl::StrContains(s.message(), w)) {
        return absl::InternalError(absl::StrCat("\"", w, "\" missing from ", s.ToString()));
      }
    }
    return CheckedAllreduce(comm, rank, 10, 2);
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

// The same strings for every rank.
std::map<int, std::vector<std::string>> Everyone(const std::vector<std::string>& want) {
  return {{0, want}, {1, want}, {2, want}};
}

TEST(CommunicatorDebugTest, DTypeMismatchFailsEveryRank) {
  ExpectMismatch(
      [](int rank, Communicator& comm) {
        return comm.Allgather(NewTensor(4, rank == 2 ? DType::kBFloat16 : DType::kFloat16),
                              NewTensor(12, rank == 2 ? DType::kBFloat16 : DType::kFloat16));
      },
      Everyone({"rank 2 called allgather #2 (bfloat16 x 4 per rank)",
                "ranks 0, 1 called allgather #2 (float16 x 4 per rank)"}));
}

TEST(CommunicatorDebugTest, ArgumentErrorOnOneRankFailsTheOthers) {
  ExpectMismatch(
      [](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(5, DType::kInt32),
                              rank == 1 ? ReduceOp::kAvg : ReduceOp::kSum);
      },
      {{0,
        {"rank 1 called allreduce #2 (int32 x 5, avg, arguments rejected by its own checks)",
         "ranks 0, 2 called allreduce #2 (int32 x 5, sum)"}},
       {1, {"allreduce #2 (int32 x 5, avg)", "int32"}},  // its own argument error
       {2, {"rank 1 called allreduce #2 (int32 x 5, avg, arguments rejected"}}});
}

}  // namespace
}  // namespace paddle
