// Tests of the collectives other than allreduce, with ranks as threads over the TCP transport and
// the in-process test transport, for every world size 1..8: ring and tree broadcast, ring
// allgather(v), ring reduce-scatter(v), tree reduce, pairwise alltoall(v) and the dissemination
// barrier. Counts include 0, 1, n-1, n+1 (not divisible by n), per-rank counts with zeros, tiny
// pieces (many pipeline steps) and a million elements; every byte of every rank's output is
// checked.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/collective/algorithms/dissemination_barrier.h"
#include "paddle/collective/algorithms/pairwise_alltoall.h"
#include "paddle/collective/algorithms/partition.h"
#include "paddle/collective/algorithms/ring_allgather.h"
#include "paddle/collective/algorithms/ring_broadcast.h"
#include "paddle/collective/algorithms/ring_reduce_scatter.h"
#include "paddle/collective/algorithms/tree_broadcast.h"
#include "paddle/collective/algorithms/tree_reduce.h"
#include "paddle/collective/reduction.h"
#include "tests/collective/algorithms/rank_group.h"

namespace paddle {
namespace {

using testutil::RankGroup;
using testutil::RankGroups;
using testutil::TransportKind;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kLargeCount = 100003;
#else
constexpr int64_t kLargeCount = 1000003;
#endif

// (transport, world size)
class CollectivesTest : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {
 protected:
  static void SetUpTestSuite() { groups_ = new RankGroups; }
  static void TearDownTestSuite() {
    delete groups_;
    groups_ = nullptr;
  }

  TransportKind kind() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
  RankGroup& group() { return groups_->Get(kind(), n()); }

  // Runs `body(rank)` on every rank; on failure reports and drops the (poisoned) group.
  bool RunOk(const std::string& what, const std::function<absl::Status(int)>& body) {
    const std::vector<absl::Status> statuses = group().Run(body);
    if (testutil::AllOk(statuses)) return true;
    ADD_FAILURE() << what << ":" << testutil::DescribeFailures(statuses);
    groups_->Discard(kind(), n());
    return false;
  }

  // Per-rank counts with zeros and unequal sizes: rank i contributes (i * 7 + salt) % 5 elements.
  std::vector<int64_t> UnevenCounts(int salt) const {
    std::vector<int64_t> counts(n());
    for (int i = 0; i < n(); ++i) counts[i] = (i * 7 + salt) % 5;
    return counts;
  }

  static RankGroups* groups_;
};

RankGroups* CollectivesTest::groups_ = nullptr;

using BroadcastFn = absl::Status (*)(const AlgorithmContext&, void*, int64_t, DType, int);

TEST_P(CollectivesTest, Broadcast) {
  struct Named {
    const char* name;
    BroadcastFn fn;
  };
  const Named algorithms[] = {{"ring", RingBroadcast}, {"tree", TreeBroadcast}};
  struct Case {
    int64_t count;
    DType dtype;
    size_t piece_bytes;  // 0: default
  };
  const Case cases[] = {{0, DType::kUInt8, 0},       {1, DType::kFloat16, 0},
                        {n() - 1, DType::kInt64, 0}, {n() + 1, DType::kFloat32, 0},
                        {41, DType::kBFloat16, 6},   {kLargeCount, DType::kFloat32, 0}};
  for (const Named& algorithm : algorithms) {
    for (const Case& c : cases) {
      for (int root : {0, n() - 1, n() / 2}) {
        const size_t bytes = static_cast<size_t>(c.count) * DTypeSize(c.dtype);
        std::vector<std::vector<uint8_t>> data(n());
        const std::string what =
            absl::StrCat(algorithm.name, " broadcast n=", n(), " count=", c.count, " root=", root);
        const uint64_t seq = group().NextSeq();
        const bool ok = RunOk(what, [&](int rank) {
          data[rank] = rank == root ? testutil::MakeBytes(seq, root, bytes)
                                    : std::vector<uint8_t>(bytes, 0xee);
          AlgorithmContext ctx = group().Context(rank, "broadcast", seq);
          if (c.piece_bytes > 0) ctx.set_piece_bytes(c.piece_bytes);
          return algorithm.fn(ctx, data[rank].data(), c.count, c.dtype, root);
        });
        if (!ok) continue;
        for (int rank = 0; rank < n(); ++rank) {
          EXPECT_TRUE(data[rank] == data[root]) << what << ": rank " << rank << " differs";
        }
      }
    }
  }
}

TEST_P(CollectivesTest, AllgatherAndAllgatherv) {
  struct Case {
    std::vector<int64_t> counts;
    DType dtype;
    size_t piece_bytes;
  };
  std::vector<Case> cases;
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n() + 1}}) {
    cases.push_back({std::vector<int64_t>(n(), count), DType::kFloat32, 0});
  }
  cases.push_back({UnevenCounts(3), DType::kFloat16, 0});
  cases.push_back({UnevenCounts(1), DType::kInt64, 2 * sizeof(int64_t)});  // tiny pieces
  cases.push_back({std::vector<int64_t>(n(), kLargeCount / n()), DType::kUInt8, 0});
  for (const Case& c : cases) {
    const std::vector<int64_t> offsets = PrefixOffsets(c.counts);
    const int64_t total = offsets.back() + c.counts.back();
    const size_t esize = DTypeSize(c.dtype);
    std::vector<std::vector<uint8_t>> data(n());
    std::vector<std::vector<uint8_t>> contributions(n());
    const std::string what = absl::StrCat("allgatherv n=", n(), " total=", total);
    const uint64_t seq = group().NextSeq();
    const bool ok = RunOk(what, [&](int rank) {
      contributions[rank] = testutil::MakeBytes(seq, rank, c.counts[rank] * esize);
      data[rank].assign(total * esize, 0xee);
      std::copy(contributions[rank].begin(), contributions[rank].end(),
                data[rank].begin() + offsets[rank] * esize);
      AlgorithmContext ctx = group().Context(rank, "allgather", seq);
      if (c.piece_bytes > 0) ctx.set_piece_bytes(c.piece_bytes);
      return RingAllgatherv(ctx, data[rank].data(), c.counts, c.dtype);
    });
    if (!ok) continue;
    std::vector<uint8_t> want;
    for (const std::vector<uint8_t>& part : contributions) {
      want.insert(want.end(), part.begin(), part.end());
    }
    for (int rank = 0; rank < n(); ++rank) {
      EXPECT_TRUE(data[rank] == want) << what << ": rank " << rank << " differs";
    }
  }
  // The equal-count form.
  std::vector<std::vector<int32_t>> data(n());
  const uint64_t seq = group().NextSeq();
  ASSERT_TRUE(RunOk("allgather", [&](int rank) {
    data[rank].assign(3 * n(), -1);
    for (int i = 0; i < 3; ++i) data[rank][3 * rank + i] = 100 * rank + i;
    return RingAllgather(group().Context(rank, "allgather", seq), data[rank].data(), 3,
                         DType::kInt32);
  }));
  for (int rank = 0; rank < n(); ++rank) {
    for (int i = 0; i < 3 * n(); ++i) ASSERT_EQ(data[rank][i], 100 * (i / 3) + i % 3);
  }
}

TEST_P(CollectivesTest, ReduceScatter) {
  struct Case {
    std::vector<int64_t> counts;
    size_t piece_elements;
  };
  const Case cases[] = {{std::vector<int64_t>(n(), 0), 0},
                        {std::vector<int64_t>(n(), 1), 0},
                        {std::vector<int64_t>(n(), n() + 1), 0},
                        {UnevenCounts(2), 0},
                        {UnevenCounts(4), 1}};
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (!CheckReduction(dtype, op).ok()) continue;
      for (const Case& c : cases) {
        const std::vector<int64_t> offsets = PrefixOffsets(c.counts);
        const int64_t total = offsets.back() + c.counts.back();
        const size_t esize = DTypeSize(dtype);
        std::vector<std::vector<uint8_t>> data(n());
        const std::string what = absl::StrCat("reduce-scatter n=", n(), " ", DTypeName(dtype), " ",
                                              ReduceOpName(op), " total=", total);
        const uint64_t seq = group().NextSeq();
        const bool ok = RunOk(what, [&](int rank) {
          data[rank] = testutil::MakeReductionInput(seq, rank, total, dtype, op);
          AlgorithmContext ctx = group().Context(rank, "reduce_scatter", seq);
          if (c.piece_elements > 0) ctx.set_piece_bytes(c.piece_elements * esize);
          return RingReduceScatter(ctx, data[rank].data(), c.counts, dtype, op);
        });
        if (!ok) continue;
        const std::vector<uint8_t> want = testutil::ExpectedReduction(seq, n(), total, dtype, op);
        for (int rank = 0; rank < n(); ++rank) {
          const auto block = [&](const std::vector<uint8_t>& v) {
            return std::vector<uint8_t>(v.begin() + offsets[rank] * esize,
                                        v.begin() + (offsets[rank] + c.counts[rank]) * esize);
          };
          EXPECT_EQ(testutil::CompareElements(block(data[rank]), block(want), dtype), "")
              << what << ": rank " << rank;
        }
      }
    }
  }
}

TEST_P(CollectivesTest, TreeReduce) {
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (!CheckReduction(dtype, op).ok()) continue;
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n() + 1}, int64_t{23}}) {
        for (int root : {0, n() - 1}) {
          const size_t esize = DTypeSize(dtype);
          std::vector<std::vector<uint8_t>> data(n());
          const uint64_t seq = group().NextSeq();
          const std::string what = absl::StrCat("tree reduce n=", n(), " ", DTypeName(dtype), " ",
                                                ReduceOpName(op), " count=", count, " root=", root);
          const bool ok = RunOk(what, [&](int rank) {
            data[rank] = testutil::MakeReductionInput(seq, rank, count, dtype, op);
            AlgorithmContext ctx = group().Context(rank, "reduce", seq);
            if (count == 23) ctx.set_piece_bytes(4 * esize);  // several segments
            return TreeReduce(ctx, data[rank].data(), count, dtype, op, root);
          });
          if (!ok) continue;
          EXPECT_EQ(testutil::CompareElements(
                        data[root], testutil::ExpectedReduction(seq, n(), count, dtype, op), dtype),
                    "")
              << what;
          for (int rank = 0; rank < n(); ++rank) {
            if (rank == root) continue;
            EXPECT_TRUE(data[rank] == testutil::MakeReductionInput(seq, rank, count, dtype, op))
                << what << ": the input of non-root rank " << rank << " changed";
          }
        }
      }
    }
  }
  // A million elements, once.
  std::vector<std::vector<uint8_t>> data(n());
  const int root = n() / 2;
  const uint64_t seq = group().NextSeq();
  ASSERT_TRUE(RunOk("large tree reduce", [&](int rank) {
    data[rank] =
        testutil::MakeReductionInput(seq, rank, kLargeCount, DType::kFloat32, ReduceOp::kSum);
    return TreeReduce(group().Context(rank, "reduce", seq), data[rank].data(), kLargeCount,
                      DType::kFloat32, ReduceOp::kSum, root);
  }));
  EXPECT_EQ(testutil::CompareElements(
                data[root],
                testutil::ExpectedReduction(seq, n(), kLargeCount, DType::kFloat32, ReduceOp::kSum),
                DType::kFloat32),
            "");
}

TEST_P(CollectivesTest, AlltoallAndAlltoallv) {
  // send_counts[r][j]: what rank r sends rank j; rank j then receives send_counts[i][j] from i.
  auto run = [&](const std::vector<std::vector<int64_t>>& send_counts, DType dtype) {
    const size_t esize = DTypeSize(dtype);
    std::vector<std::vector<uint8_t>> in(n()), out(n());
    std::vector<std::vector<int64_t>> recv_counts(n(), std::vector<int64_t>(n()));
    for (int i = 0; i < n(); ++i) {
      for (int j = 0; j < n(); ++j) recv_counts[j][i] = send_counts[i][j];
    }
    const uint64_t seq = group().NextSeq();
    if (!RunOk("alltoallv", [&](int rank) {
          int64_t send_total = 0, recv_total = 0;
          for (int j = 0; j < n(); ++j) {
            send_total += send_counts[rank][j];
            recv_total += recv_counts[rank][j];
          }
          in[rank] = testutil::MakeBytes(seq, rank, send_total * esize);
          out[rank].assign(recv_total * esize, 0xee);
          return PairwiseAlltoallv(group().Context(rank, "alltoall", seq), in[rank].data(),
                                   send_counts[rank], out[rank].data(), recv_counts[rank], dtype);
        })) {
      return;
    }
    for (int rank = 0; rank < n(); ++rank) {
      std::vector<uint8_t> want;
      for (int i = 0; i < n(); ++i) {
        int64_t offset = 0;
        for (int j = 0; j < rank; ++j) offset += send_counts[i][j];
        want.insert(want.end(), in[i].begin() + offset * esize,
                    in[i].begin() + (offset + send_counts[i][rank]) * esize);
      }
      EXPECT_TRUE(out[rank] == want) << "alltoallv n=" << n() << ": rank " << rank << " differs";
    }
  };
  for (int64_t count : {0, 1, 3}) {
    run(std::vector<std::vector<int64_t>>(n(), std::vector<int64_t>(n(), count)), DType::kInt32);
  }
  std::vector<std::vector<int64_t>> uneven(n(), std::vector<int64_t>(n()));
  for (int i = 0; i < n(); ++i) {
    for (int j = 0; j < n(); ++j) uneven[i][j] = (i * 3 + j * 5) % 4;
  }
  run(uneven, DType::kFloat16);
  run(std::vector<std::vector<int64_t>>(n(), std::vector<int64_t>(n(), kLargeCount / n())),
      DType::kUInt8);

  // The equal-count form.
  std::vector<std::vector<int32_t>> in(n()), out(n());
  const uint64_t seq = group().NextSeq();
  ASSERT_TRUE(RunOk("alltoall", [&](int rank) {
    in[rank].resize(2 * n());
    out[rank].assign(2 * n(), -1);
    for (int j = 0; j < 2 * n(); ++j) in[rank][j] = 1000 * rank + j;  // block j/2 goes to rank j/2
    return PairwiseAlltoall(group().Context(rank, "alltoall", seq), in[rank].data(),
                            out[rank].data(), 2, DType::kInt32);
  }));
  for (int rank = 0; rank < n(); ++rank) {
    for (int i = 0; i < n(); ++i) {
      EXPECT_EQ(out[rank][2 * i], 1000 * i + 2 * rank);
      EXPECT_EQ(out[rank][2 * i + 1], 1000 * i + 2 * rank + 1);
    }
  }
}

// Alltoallv counts that do not match across ranks fail with both sizes named, not a hang. With
// one rank the mismatch is in its own block, found before anything is sent.
TEST_P(CollectivesTest, AlltoallvCountMismatchIsAnError) {
  RankGroup& g = group();
  if (n() == 1) {
    const std::vector<absl::Status> statuses = g.Run([&](int rank) {
      std::vector<int64_t> send = {1}, recv = {2};
      std::vector<int32_t> in(1), out(2);
      return PairwiseAlltoallv(g.Context(rank, "alltoall", g.NextSeq()), in.data(), send,
                               out.data(), recv, DType::kInt32);
    });
    ASSERT_TRUE(absl::IsInvalidArgument(statuses[0])) << statuses[0];
    EXPECT_NE(statuses[0].message().find("sends itself 1 elements but expects 2"),
              std::string::npos)
        << statuses[0];
    return;
  }
  const uint64_t seq = g.NextSeq();
  const std::vector<absl::Status> statuses = g.Run([&](int rank) {
    std::vector<int64_t> send(n(), 1), recv(n(), 1);
    if (rank == 1) recv[0] = 2;  // rank 0 sends 1 element, rank 1 expects 2
    std::vector<int32_t> in(n()), out(n() + 1);
    return PairwiseAlltoallv(g.Context(rank, "alltoall", seq), in.data(), send, out.data(), recv,
                             DType::kInt32);
  });
  ASSERT_FALSE(statuses[1].ok());
  EXPECT_NE(statuses[1].message().find("alltoall #"), std::string::npos) << statuses[1];
  EXPECT_NE(statuses[1].message().find("8 bytes"), std::string::npos) << statuses[1];
  groups_->Discard(kind(), n());  // the mismatch poisoned the transports
}

TEST_P(CollectivesTest, BarrierHoldsEveryRankUntilAllArrive) {
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> arrived{0};
    std::vector<int> seen(n(), -1);
    const uint64_t seq = group().NextSeq();
    ASSERT_TRUE(RunOk("barrier", [&](int rank) {
      // Late arrivals: rank r enters after r milliseconds (the last one latest).
      std::this_thread::sleep_for(std::chrono::milliseconds((rank + round) % n()));
      arrived.fetch_add(1);
      absl::Status s = DisseminationBarrier(group().Context(rank, "barrier", seq));
      seen[rank] = arrived.load();
      return s;
    }));
    for (int rank = 0; rank < n(); ++rank) {
      EXPECT_EQ(seen[rank], n()) << "rank " << rank << " left the barrier early (round " << round
                                 << ")";
    }
  }
}

// Invalid arguments are kInvalidArgument with rank and op context, before any message.
TEST_P(CollectivesTest, BadArguments) {
  RankGroup& g = group();
  const uint64_t seq = g.NextSeq();
  const std::vector<absl::Status> statuses = g.Run([&](int rank) -> absl::Status {
    AlgorithmContext ctx = g.Context(rank, "collective", seq);
    float x[4] = {};
    const std::vector<int64_t> wrong_size(n() + 1, 1);
    const absl::Status checks[] = {
        RingBroadcast(ctx, x, 4, DType::kFloat32, n()),
        TreeBroadcast(ctx, x, 4, DType::kFloat32, -1),
        TreeReduce(ctx, x, 4, DType::kFloat32, ReduceOp::kSum, n()),
        TreeReduce(ctx, x, 4, DType::kInt32, ReduceOp::kAvg, 0),
        RingAllgatherv(ctx, x, wrong_size, DType::kFloat32),
        RingReduceScatter(ctx, x, wrong_size, DType::kFloat32, ReduceOp::kSum),
        RingAllgather(ctx, x, -1, DType::kFloat32),
        PairwiseAlltoall(ctx, x, x, -2, DType::kFloat32),
    };
    for (const absl::Status& s : checks) {
      if (s.code() != absl::StatusCode::kInvalidArgument ||
          s.message().find("op collective #") == std::string::npos) {
        return absl::InternalError(absl::StrCat("expected an argument error, got ", s.ToString()));
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(testutil::AllOk(statuses)) << testutil::DescribeFailures(statuses);
}

INSTANTIATE_TEST_SUITE_P(TransportsAndWorldSizes, CollectivesTest,
                         ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                                              TransportKind::kInProcess),
                                            ::testing::Range(1, 9)),
                         [](const ::testing::TestParamInfo<std::tuple<TransportKind, int>>& info) {
                           return absl::StrCat(testutil::TransportKindName(std::get<0>(info.param)),
                                               "_n", std::get<1>(info.param));
                         });

}  // namespace
}  // namespace paddle
