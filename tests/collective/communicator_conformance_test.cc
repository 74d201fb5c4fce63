// The communicator contract (communicator.h), one suite run over the CPU backends, native and
// Gloo. NCCL takes CUDA tensors only, so its contract is checked by tests/collective/nccl on a GPU
// machine (tools/gpu-bundle), not here. Ranks are threads over one store (CommGroup), world sizes
// 1..8. Every collective with counts 0, 1, odd and (for a rotating subset) large, every dtype and
// reduce op, every root; every output element of every rank is compared with the value computed
// from (seed, rank, index) (Note [Exact communicator inputs] in communicator_testing.h). Then the
// error cases every backend must meet alike: bad arguments, a rank that never joins, a Work::Wait
// that gives up, Abort from another thread, and the debug checks' disagreements.
//
// What only one backend has stays in its own test: the native algorithms and transports
// (communicator_sweep_test, communicator_test), Gloo's algorithms, connect and process tests
// (gloo_communicator_test), NCCL's streams (nccl_communicator_test).
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
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

using commtest::CheckBytes;
using commtest::CommGroup;
using commtest::CompareElements;
using commtest::ExpectedReduction;
using commtest::FillBytes;
using commtest::GroupOptions;
using commtest::kGenerous;
using commtest::MakeReductionInput;
using commtest::NewTensor;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kLargeCount = 100003;  // every byte costs ten times more under a sanitizer
#else
constexpr int64_t kLargeCount = 300007;
#endif

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

// "" if every status is OK, else one line per failed rank.
std::string Failures(const std::vector<absl::Status>& statuses) {
  return commtest::AllOk(statuses) ? "" : commtest::DescribeFailures(statuses);
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

struct Param {
  Backend backend;
  int world_size;
};

class ConformanceTest : public ::testing::TestWithParam<Param> {
 protected:
  // One group per (backend, world size) serves every test that leaves it healthy: creating
  // groups is most of the suite's time otherwise.
  void SetUp() override {
    std::unique_ptr<CommGroup>& kept = Kept()[Key()];
    group_ = kept != nullptr ? std::move(kept) : MakeGroup(false);
  }
  void TearDown() override {
    if (group_ != nullptr && !poisoned_ && !HasFailure()) Kept()[Key()] = std::move(group_);
    group_.reset();
  }
  static void TearDownTestSuite() { Kept().clear(); }

  // A group of this test's backend and size (null after a failed expectation).
  std::unique_ptr<CommGroup> MakeGroup(bool debug_checks, absl::Duration timeout = kGenerous) {
    GroupOptions options;
    options.backend = GetParam().backend;
    options.world_size = n();
    options.debug_checks = debug_checks;
    options.timeout = timeout;
    absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::move(*group) : nullptr;
  }

  static std::map<std::pair<int, int>, std::unique_ptr<CommGroup>>& Kept() {
    static auto* kept = new std::map<std::pair<int, int>, std::unique_ptr<CommGroup>>();
    return *kept;
  }
  std::pair<int, int> Key() const { return {static_cast<int>(GetParam().backend), n()}; }

  int n() const { return GetParam().world_size; }
  std::string Who(int rank) const { return absl::StrCat("rank ", rank, "/", n()); }
  std::unique_ptr<CommGroup> group_;
  bool poisoned_ = false;  // the test leaves group_ poisoned: it is not kept
};

#define REQUIRE_GROUP(group) ASSERT_NE(group, nullptr)

// ---- Results ----

TEST_P(ConformanceTest, AllreduceEveryElementOfEveryDTypeAndOp) {
  REQUIRE_GROUP(group_);
  uint64_t seed = 17 + n();
  int rotation = 0;
  for (DType dtype : commtest::SweepDTypes()) {
    for (ReduceOp op : kOps) {
      if (!commtest::OpApplies(dtype, op)) continue;  // integer avg: kInvalidArgument
      std::vector<int64_t> counts = {0, 1, 2 * n() + 1};
      // The large case for a rotating (dtype, op) subset, so it covers each over the world sizes.
      if (rotation++ % 8 == n() % 8) counts.push_back(kLargeCount);
      for (int64_t count : counts) {
        ++seed;
        const std::string what =
            absl::StrCat("count=", count, " ", DTypeName(dtype), " ", ReduceOpName(op));
        std::vector<Tensor> data(n());
        std::vector<absl::Status> statuses = group_->Run([&](int rank, Communicator& comm) {
          data[rank] = MakeReductionInput(count, dtype, seed, rank, op);
          return comm.Allreduce(data[rank], op)->Wait();
        });
        ASSERT_EQ(Failures(statuses), "") << what;
        const Tensor want = ExpectedReduction(0, count, dtype, n(), seed, op);
        for (int rank = 0; rank < n(); ++rank) {
          absl::Status same =
              CompareElements(data[rank], want, 0, absl::StrCat(what, ", rank ", rank));
          ASSERT_TRUE(same.ok()) << same;
        }
      }
    }
  }
}

TEST_P(ConformanceTest, BroadcastFromEveryRoot) {
  REQUIRE_GROUP(group_);
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{2 * n() + 1}, int64_t{kLargeCount}}) {
    for (int root = 0; root < n(); ++root) {
      if (count == kLargeCount && root != n() - 1) continue;  // time
      const uint64_t seed = 100 + root;
      std::vector<Tensor> data(n());
      auto statuses = group_->Run([&](int rank, Communicator& comm) {
        data[rank] = NewTensor(count, DType::kFloat32);
        FillBytes(data[rank], seed, rank);
        return comm.Broadcast(data[rank], root)->Wait();
      });
      ASSERT_EQ(Failures(statuses), "");
      for (int rank = 0; rank < n(); ++rank) {
        absl::Status same =
            CheckBytes(data[rank], 0, count * 4, seed, root, 0,
                       absl::StrCat("count ", count, " root ", root, " rank ", rank));
        ASSERT_TRUE(same.ok()) << same;
      }
    }
  }
}

TEST_P(ConformanceTest, ReduceToEveryRoot) {
  REQUIRE_GROUP(group_);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && dtype == DType::kInt64) continue;
      // The first, a middle and the last root (every root up to 3 ranks).
      for (int root : std::set<int>{0, n() / 2, n() - 1}) {
        const int64_t count = 3 * n() + 2;
        const uint64_t seed = 200 + root;
        std::vector<Tensor> data(n());
        auto statuses = group_->Run([&](int rank, Communicator& comm) {
          data[rank] = MakeReductionInput(count, dtype, seed, rank, op);
          return comm.Reduce(data[rank], root, op)->Wait();
        });
        ASSERT_EQ(Failures(statuses), "");
        absl::Status same =
            CompareElements(data[root], ExpectedReduction(0, count, dtype, n(), seed, op), 0,
                            absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " root ", root));
        EXPECT_TRUE(same.ok()) << same;
      }
    }
  }
}

TEST_P(ConformanceTest, AllgatherAndAllgatherv) {
  REQUIRE_GROUP(group_);
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{2 * n() + 1}}) {
    const uint64_t seed = 300 + count;
    std::vector<Tensor> out(n());
    auto statuses = group_->Run([&](int rank, Communicator& comm) {
      Tensor in = NewTensor(count, DType::kInt64);
      FillBytes(in, seed, rank);
      out[rank] = NewTensor(n() * count, DType::kInt64);
      return comm.Allgather(in, out[rank])->Wait();
    });
    ASSERT_EQ(Failures(statuses), "");
    for (int rank = 0; rank < n(); ++rank) {
      for (int r = 0; r < n(); ++r) {
        absl::Status same = CheckBytes(out[rank], r * count * 8, count * 8, seed, r, 0,
                                       absl::StrCat("rank ", rank, " block ", r));
        ASSERT_TRUE(same.ok()) << same;
      }
    }
  }
  // Allgatherv with a zero count, an odd one and uneven others.
  std::vector<int64_t> counts(n());
  for (int r = 0; r < n(); ++r) counts[r] = r == 1 ? 0 : 2 * r + 3;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<Tensor> out(n());
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    Tensor in = NewTensor(counts[rank], DType::kFloat16);
    FillBytes(in, 400, rank);
    out[rank] = NewTensor(total, DType::kFloat16);
    return comm.Allgatherv(in, out[rank], counts)->Wait();
  });
  ASSERT_EQ(Failures(statuses), "");
  for (int rank = 0; rank < n(); ++rank) {
    int64_t offset = 0;
    for (int r = 0; r < n(); ++r) {
      absl::Status same = CheckBytes(out[rank], offset * 2, counts[r] * 2, 400, r, 0,
                                     absl::StrCat("allgatherv rank ", rank, " block ", r));
      EXPECT_TRUE(same.ok()) << same;
      offset += counts[r];
    }
  }
}

TEST_P(ConformanceTest, ReduceScatter) {
  REQUIRE_GROUP(group_);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt32}) {
    for (ReduceOp op : kOps) {
      if (!commtest::OpApplies(dtype, op)) continue;
      for (int64_t block : {int64_t{0}, int64_t{1}, int64_t{7}}) {
        const uint64_t seed = 500 + block;
        std::vector<Tensor> out(n());
        auto statuses = group_->Run([&](int rank, Communicator& comm) {
          Tensor in = MakeReductionInput(n() * block, dtype, seed, rank, op);
          out[rank] = NewTensor(block, dtype);
          return comm.ReduceScatter(in, out[rank], op)->Wait();
        });
        ASSERT_EQ(Failures(statuses), "");
        for (int rank = 0; rank < n(); ++rank) {
          absl::Status same = CompareElements(
              out[rank], ExpectedReduction(rank * block, block, dtype, n(), seed, op), rank * block,
              absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " block ", block, " rank ",
                           rank));
          EXPECT_TRUE(same.ok()) << same;
        }
      }
    }
  }
}

TEST_P(ConformanceTest, AlltoallAndAlltoallv) {
  REQUIRE_GROUP(group_);
  const int64_t block = 5;
  std::vector<Tensor> out(n());
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    Tensor in = NewTensor(n() * block, DType::kInt32);
    FillBytes(in, 600, rank);
    out[rank] = NewTensor(n() * block, DType::kInt32);
    return comm.Alltoall(in, out[rank])->Wait();
  });
  ASSERT_EQ(Failures(statuses), "");
  for (int rank = 0; rank < n(); ++rank) {
    for (int r = 0; r < n(); ++r) {
      absl::Status same = CheckBytes(out[rank], r * block * 4, block * 4, 600, r, rank * block * 4,
                                     absl::StrCat("alltoall rank ", rank));
      EXPECT_TRUE(same.ok()) << same;
    }
  }

  // Alltoallv: rank i sends (i + j) % 3 elements to rank j (some zero), uint8.
  auto amount = [](int from, int to) { return int64_t{(from + to) % 3}; };
  statuses = group_->Run([&](int rank, Communicator& comm) {
    std::vector<int64_t> send(n()), recv(n());
    int64_t send_total = 0, recv_total = 0;
    for (int j = 0; j < n(); ++j) {
      send[j] = amount(rank, j);
      recv[j] = amount(j, rank);
      send_total += send[j];
      recv_total += recv[j];
    }
    Tensor in = NewTensor(send_total, DType::kUInt8);
    FillBytes(in, 700, rank);
    out[rank] = NewTensor(recv_total, DType::kUInt8);
    return comm.Alltoallv(in, out[rank], send, recv)->Wait();
  });
  ASSERT_EQ(Failures(statuses), "");
  for (int rank = 0; rank < n(); ++rank) {
    int64_t received = 0;
    for (int r = 0; r < n(); ++r) {
      int64_t offset = 0;  // where rank r's block for `rank` starts in r's input
      for (int j = 0; j < rank; ++j) offset += amount(r, j);
      absl::Status same = CheckBytes(out[rank], received, amount(r, rank), 700, r, offset,
                                     absl::StrCat("alltoallv rank ", rank, " from ", r));
      EXPECT_TRUE(same.ok()) << same;
      received += amount(r, rank);
    }
  }
}

TEST_P(ConformanceTest, BarrierAndSendRecvAroundTheRing) {
  REQUIRE_GROUP(group_);
  auto statuses = group_->Run([&](int rank, Communicator& comm) { return comm.Barrier()->Wait(); });
  ASSERT_EQ(Failures(statuses), "");
  if (n() == 1) return;
  std::vector<Tensor> got(n());
  statuses = group_->Run([&](int rank, Communicator& comm) {
    Tensor mine = NewTensor(1001, DType::kUInt8);
    FillBytes(mine, 800, rank);
    got[rank] = NewTensor(1001, DType::kUInt8);
    // Post the receive first on odd ranks and the send first on even ones: order must not matter.
    std::shared_ptr<Work> send, recv;
    if (rank % 2 == 0) {
      send = comm.Send(mine, (rank + 1) % n(), 7);
      recv = comm.Recv(got[rank], (rank + n() - 1) % n(), 7);
    } else {
      recv = comm.Recv(got[rank], (rank + n() - 1) % n(), 7);
      send = comm.Send(mine, (rank + 1) % n(), 7);
    }
    absl::Status s = send->Wait();
    absl::Status r = recv->Wait();
    return s.ok() ? r : s;
  });
  ASSERT_EQ(Failures(statuses), "");
  for (int rank = 0; rank < n(); ++rank) {
    absl::Status same = CheckBytes(got[rank], 0, 1001, 800, (rank + n() - 1) % n(), 0,
                                   absl::StrCat("recv on rank ", rank));
    EXPECT_TRUE(same.ok()) << same;
  }
}

TEST_P(ConformanceTest, SplitIntoEvenAndOddRanks) {
  REQUIRE_GROUP(group_);
  std::vector<int> even, odd;
  for (int r = 0; r < n(); ++r) (r % 2 == 0 ? even : odd).push_back(r);
  if (odd.empty()) odd = even;  // one rank: both calls give it a group
  std::vector<std::unique_ptr<Communicator>> subs(n());
  std::vector<Tensor> data(n());
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    // Every rank makes both calls, in the same order; each gets one communicator back.
    absl::StatusOr<std::unique_ptr<Communicator>> a = comm.Split(even);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<Communicator>> b = comm.Split(odd);
    if (!b.ok()) return b.status();
    if (n() > 1 && (*a == nullptr) == (*b == nullptr)) {
      return absl::InternalError("not exactly one group");
    }
    subs[rank] = *a ? *std::move(a) : *std::move(b);
    const std::vector<int>& mine = rank % 2 == 0 ? even : odd;
    if (subs[rank]->world_size() != static_cast<int>(mine.size()) ||
        mine[subs[rank]->rank()] != rank) {
      return absl::InternalError("wrong rank or size in the split group");
    }
    // Inputs by rank in the new group, so the expected result is that of a group of its size.
    data[rank] = MakeReductionInput(11, DType::kFloat32, 900, subs[rank]->rank(), ReduceOp::kSum);
    return subs[rank]->Allreduce(data[rank], ReduceOp::kSum)->Wait();
  });
  ASSERT_EQ(Failures(statuses), "");
  for (int rank = 0; rank < n(); ++rank) {
    const int sub_size = static_cast<int>((rank % 2 == 0 ? even : odd).size());
    absl::Status same = CompareElements(
        data[rank], ExpectedReduction(0, 11, DType::kFloat32, sub_size, 900, ReduceOp::kSum), 0,
        absl::StrCat("split group of rank ", rank));
    EXPECT_TRUE(same.ok()) << same;
  }
  std::vector<std::thread> threads;
  for (auto& sub : subs) threads.emplace_back([&sub] { sub.reset(); });
  for (std::thread& t : threads) t.join();
}

// ---- Errors ----

TEST_P(ConformanceTest, BadArgumentsFailAtOnceAndLeaveTheGroupWorking) {
  REQUIRE_GROUP(group_);
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    const Tensor f32 = NewTensor(10, DType::kFloat32);
    std::vector<int64_t> short_counts(n() + 1, 1);
    const std::vector<std::pair<std::shared_ptr<Work>, std::string>> calls = {
        {comm.Allreduce(NewTensor(10, DType::kInt32), ReduceOp::kAvg), "allreduce"},
        {comm.Allreduce(Tensor(), ReduceOp::kSum), "undefined"},
        {comm.Broadcast(f32, n()), absl::StrCat("root ", n())},
        {comm.Reduce(f32, -1, ReduceOp::kSum), "root -1"},
        {comm.Allgather(f32, NewTensor(10 * n() + 1, DType::kFloat32)), "output"},
        {comm.Allgather(f32, NewTensor(10 * n(), DType::kInt32)), "float32 but output is int32"},
        {comm.Allgatherv(f32, NewTensor(n() + 1, DType::kFloat32), short_counts), "counts"},
        {comm.ReduceScatter(NewTensor(10 * n() + 1, DType::kFloat32), f32, ReduceOp::kSum),
         "input"},
        {comm.Alltoall(NewTensor(n() * 3 + 1, DType::kFloat32),
                       NewTensor(n() * 3, DType::kFloat32)),
         n() == 1 ? "output" : "multiple of the world size"},
        {comm.Alltoallv(f32, f32, short_counts, short_counts), "send_counts"},
        {comm.Send(f32, rank), "itself"},
        {comm.Recv(f32, n()), "source rank"},
    };
    for (const auto& [work, want] : calls) {
      if (!work->IsCompleted()) {
        return absl::InternalError(absl::StrCat(work->Describe(), " did not fail at once"));
      }
      const absl::Status e = work->status();
      if (!absl::IsInvalidArgument(e) || !absl::StrContains(e.message(), Who(rank)) ||
          !absl::StrContains(e.message(), want)) {
        return absl::InternalError(absl::StrCat("want kInvalidArgument naming ", Who(rank),
                                                " and \"", want, "\", got ", e.ToString()));
      }
    }
    return CheckedAllreduce(comm, rank, 10, 1);
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST_P(ConformanceTest, MissingRankTimesOutAndPoisons) {
  REQUIRE_GROUP(group_);
  if (n() == 1) GTEST_SKIP() << "needs a rank that stays away; runs at world sizes 2-8";
  poisoned_ = true;
  constexpr absl::Duration kTimeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 8, 1));  // works
    if (rank == n() - 1) return absl::OkStatus();         // the last rank never calls #2
    Tensor t = NewTensor(1000, DType::kFloat32);
    std::shared_ptr<Work> work = comm.Allreduce(t, ReduceOp::kSum, CallOptions{kTimeout});
    std::shared_ptr<Work> queued = comm.Broadcast(t, 0);
    const absl::Status s = work->Wait();
    if (s.ok() || !absl::StrContains(s.message(), absl::StrCat("allreduce #", work->seq())) ||
        !absl::StrContains(s.message(), Who(rank))) {
      return absl::InternalError(absl::StrCat(work->Describe(), ": ", s.ToString()));
    }
    const absl::Status q = queued->Wait(kGenerous);
    if (!absl::StrContains(q.message(), absl::StrCat("broadcast #", queued->seq())) ||
        !absl::StrContains(q.message(), "was not run") ||
        !absl::StrContains(q.message(), "poisoned")) {
      return absl::InternalError(absl::StrCat("queued broadcast: ", q.ToString()));
    }
    std::shared_ptr<Work> later = comm.Barrier();  // fails at once
    if (!later->IsCompleted() || !absl::StrContains(later->status().message(), "was not run")) {
      return absl::InternalError(absl::StrCat("later barrier: ", later->status().ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST_P(ConformanceTest, WorkWaitTimeoutLeavesTheOperationRunning) {
  REQUIRE_GROUP(group_);
  if (n() == 1) GTEST_SKIP() << "needs a rank that comes late; runs at world sizes 2-8";
  std::shared_ptr<Work> first =
      group_->comm(0).Allreduce(NewTensor(16, DType::kFloat32), ReduceOp::kSum);
  const absl::Status early = first->Wait(absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(early)) << early;
  EXPECT_TRUE(absl::StrContains(early.message(), first->Describe())) << early;
  EXPECT_FALSE(first->IsCompleted());
  EXPECT_TRUE(absl::IsUnavailable(first->status())) << first->status();
  auto statuses = group_->Run([&](int rank, Communicator& comm) {
    if (rank == 0) return first->Wait();
    return comm.Allreduce(NewTensor(16, DType::kFloat32), ReduceOp::kSum)->Wait();
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST_P(ConformanceTest, AbortFromAnotherThreadWakesEverything) {
  REQUIRE_GROUP(group_);
  poisoned_ = true;
  Communicator& comm = group_->comm(0);
  Tensor t = NewTensor(1 << 16, DType::kFloat32);
  // With peers, they never join. Abort wakes the running allreduce at once where the backend can
  // (native); Gloo cannot interrupt an operation inside Gloo (Note [Gloo backend semantics]), so it
  // ends at its 1 s timeout, and fails with the abort's cause all the same.
  std::shared_ptr<Work> running = comm.Allreduce(t, ReduceOp::kSum, CallOptions{absl::Seconds(1)});
  std::shared_ptr<Work> queued = comm.Barrier();
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  std::thread aborter([&] { comm.Abort(absl::CancelledError("the job is shutting down")); });
  const absl::Status r = running->Wait(absl::Seconds(30));
  const absl::Status q = queued->Wait(absl::Seconds(30));
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const absl::Status& s : n() == 1 ? std::vector<absl::Status>{} : std::vector{r, q}) {
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "the job is shutting down")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), Who(0))) << s;
  }
  comm.Abort(absl::InternalError("a second cause"));  // harmless; the first one stays
  const absl::Status after = comm.Barrier()->Wait(absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(after.message(), "was not run")) << after;
  EXPECT_TRUE(absl::StrContains(after.message(), "the job is shutting down")) << after;
  if (n() == 1) return;
  // The peers learn of it through the closed links rather than by timing out.
  const absl::Time peer_start = absl::Now();
  auto statuses = group_->Run([&](int rank, Communicator& peer) {
    if (rank == 0) return absl::OkStatus();
    const absl::Status p = peer.Allreduce(NewTensor(1 << 16, DType::kFloat32), ReduceOp::kSum)
                               ->Wait(absl::Seconds(60));
    return p.ok() ? absl::InternalError("an allreduce without rank 0 succeeded") : absl::OkStatus();
  });
  EXPECT_EQ(Failures(statuses), "");
  EXPECT_LT(absl::Now() - peer_start, absl::Seconds(30));
}

// ---- Debug checks (Note [Collective debug checks]) ----

// Runs `call` on every rank of a debug-mode group and expects every rank to fail with
// kInvalidArgument, rank r's message containing every string of want(r), well before the long
// timeout; then the group must still work: a disagreement does not poison it.
void ExpectMismatch(CommGroup& group,
                    const std::function<std::shared_ptr<Work>(int rank, Communicator&)>& call,
                    const std::function<std::vector<std::string>(int rank)>& want) {
  const absl::Time start = absl::Now();
  auto statuses = group.Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 10, 1));  // #1 agrees
    const absl::Status s = call(rank, comm)->Wait();
    if (!absl::IsInvalidArgument(s)) {
      return absl::InternalError(absl::StrCat("want kInvalidArgument, got ", s.ToString()));
    }
    for (const std::string& w : want(rank)) {
      if (!absl::StrContains(s.message(), w)) {
        return absl::InternalError(absl::StrCat("\"", w, "\" missing from ", s.ToString()));
      }
    }
    return CheckedAllreduce(comm, rank, 10, 2);
  });
  EXPECT_EQ(Failures(statuses), "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

TEST_P(ConformanceTest, DebugChecksNameWhoPassedWhat) {
  REQUIRE_GROUP(group_);
  if (n() == 1) GTEST_SKIP() << "one rank always agrees with itself; runs at world sizes 2-8";
  group_.reset();
  std::unique_ptr<CommGroup> group = MakeGroup(/*debug_checks=*/true);
  ASSERT_NE(group, nullptr);
  // Matching calls pass, including alltoallv with per-pair counts and Split.
  auto statuses = group->Run([&](int rank, Communicator& comm) {
    RETURN_IF_ERROR(CheckedAllreduce(comm, rank, 100, 1));
    RETURN_IF_ERROR(comm.Barrier()->Wait());
    std::vector<int64_t> counts(n());
    int64_t total = 0;
    for (int j = 0; j < n(); ++j) total += counts[j] = rank + j + 1;
    Tensor in = NewTensor(total, DType::kFloat32);
    Tensor out = NewTensor(total, DType::kFloat32);
    RETURN_IF_ERROR(comm.Alltoallv(in, out, counts, counts)->Wait());
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split({0, n() - 1}));
    if (sub != nullptr) RETURN_IF_ERROR(CheckedAllreduce(*sub, sub->rank(), 7, 2));
    return CheckedAllreduce(comm, rank, 100, 3);
  });
  ASSERT_EQ(Failures(statuses), "");
  // Calls #4 and #5 of the group above (Split takes one on native only), so name no number.
  const int odd = n() - 1;
  const std::string others = n() == 2 ? "rank 0" : absl::StrCat("ranks 0, ");
  ExpectMismatch(
      *group,
      [&](int rank, Communicator& comm) {
        return comm.Allreduce(NewTensor(rank == odd ? 10 : 12, DType::kFloat32), ReduceOp::kSum);
      },
      [&](int) {
        return std::vector<std::string>{absl::StrCat("rank ", odd, " called allreduce #"),
                                        "(float32 x 10, sum)", "(float32 x 12, sum)", others,
                                        "PADDLE_DEBUG_CHECKS"};
      });
  ExpectMismatch(
      *group,
      [&](int rank, Communicator& comm) {
        Tensor t = NewTensor(6, DType::kInt32);
        return rank == 0 ? comm.Broadcast(t, 0) : comm.Reduce(t, 0, ReduceOp::kMax);
      },
      [&](int) {
        return std::vector<std::string>{"rank 0 called broadcast #", "(int32 x 6, root 0)",
                                        "called reduce #", "(int32 x 6, max, root 0)"};
      });
  ExpectMismatch(
      *group,
      [&](int rank, Communicator& comm) {
        // Every rank sends 2 to every rank, but rank 0 expects 3 from rank 1.
        std::vector<int64_t> send(n(), 2), recv(n(), 2);
        if (rank == 0) recv[1] = 3;
        return comm.Alltoallv(NewTensor(2 * n(), DType::kFloat32),
                              NewTensor(2 * n() + (rank == 0), DType::kFloat32), send, recv);
      },
      [&](int rank) {
        if (rank > 1) return std::vector<std::string>{"found that the ranks' calls do not match"};
        return std::vector<std::string>{
            "rank 1 sends 2 elements to rank 0, which expects 3 (its recv_counts[1])"};
      });
  group->Destroy();
}

std::vector<Param> AllParams() {
  std::vector<Param> params;
  for (Backend backend : {Backend::kNative, Backend::kGloo}) {
    for (int n = 1; n <= 8; ++n) {
      params.push_back({backend, n});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return absl::StrCat(BackendName(info.param.backend),
                                               info.param.world_size);
                         });

}  // namespace
}  // namespace paddle
