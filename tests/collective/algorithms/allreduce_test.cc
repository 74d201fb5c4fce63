// Tests of the three allreduce algorithms (ring, tree = recursive doubling, hd = halving-doubling)
// with ranks as threads over the TCP transport and the in-process test transport (rendezvous
// sends, see in_process_transport.h): every world size 1..8 x count (0, 1, n-1, n+1,
// 5n+3 in two-element pieces, 1000003 for a rotating subset) x dtype x op x algorithm, every
// output element of every rank compared bit for bit with the expected result (Note [Exact
// inputs] in rank_group.h). Plus: results are the same bits on every rank for inexact random
// floats, a 64 MiB buffer, and bad arguments failing on every rank without poisoning the link.
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/collective/algorithms/halving_doubling_allreduce.h"
#include "paddle/collective/algorithms/ring_allreduce.h"
#include "paddle/collective/algorithms/tree_allreduce.h"
#include "paddle/collective/reduction.h"
#include "tests/collective/algorithms/rank_group.h"

namespace paddle {
namespace {

using testutil::RankGroup;
using testutil::RankGroups;
using testutil::TransportKind;

using AllreduceFn = absl::Status (*)(const AlgorithmContext&, void*, int64_t, DType, ReduceOp);

struct NamedAllreduce {
  const char* name;
  AllreduceFn fn;
};

constexpr NamedAllreduce kAlgorithms[] = {
    {"ring", RingAllreduce}, {"tree", TreeAllreduce}, {"hd", HalvingDoublingAllreduce}};
constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // every byte copied costs ten times more
#else
constexpr bool kSanitized = false;
#endif

// (transport, world size)
class AllreduceTest : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {
 protected:
  static void SetUpTestSuite() { groups_ = new RankGroups; }
  static void TearDownTestSuite() {
    delete groups_;
    groups_ = nullptr;
  }

  TransportKind kind() const { return std::get<0>(GetParam()); }
  int world_size() const { return std::get<1>(GetParam()); }
  RankGroup& group() { return groups_->Get(kind(), world_size()); }

  // Runs one allreduce on every rank and checks every element of every rank's output.
  // piece_bytes 0 keeps the default.
  void RunCase(const NamedAllreduce& algorithm, int64_t count, DType dtype, ReduceOp op,
               size_t piece_bytes) {
    const int world_size = this->world_size();
    const std::string what =
        absl::StrCat(algorithm.name, " allreduce over ", testutil::TransportKindName(kind()),
                     ", n=", world_size, ", count=", count, ", ", DTypeName(dtype), " ",
                     ReduceOpName(op), ", piece_bytes=", piece_bytes);
    RankGroup& group = this->group();
    const uint64_t seq = group.NextSeq();
    const uint64_t seed = seq * 1000003 + world_size;
    std::vector<std::vector<uint8_t>> data(world_size);
    const std::vector<absl::Status> statuses = group.Run([&](int rank) {
      data[rank] = testutil::MakeReductionInput(seed, rank, count, dtype, op);
      AlgorithmContext ctx = group.Context(rank, "allreduce", seq);
      if (piece_bytes > 0) ctx.set_piece_bytes(piece_bytes);
      return algorithm.fn(ctx, data[rank].data(), count, dtype, op);
    });
    if (!testutil::AllOk(statuses)) {
      ADD_FAILURE() << what << ":" << testutil::DescribeFailures(statuses);
      groups_->Discard(kind(), world_size);
      return;
    }
    const std::vector<uint8_t> want =
        testutil::ExpectedReduction(seed, world_size, count, dtype, op);
    for (int rank = 0; rank < world_size; ++rank) {
      const std::string diff = testutil::CompareElements(data[rank], want, dtype);
      EXPECT_TRUE(diff.empty()) << what << ", rank " << rank << ": " << diff;
    }
  }

  static RankGroups* groups_;
};

RankGroups* AllreduceTest::groups_ = nullptr;

TEST_P(AllreduceTest, EveryCountDtypeOpAndAlgorithm) {
  const int n = world_size();
  struct CountCase {
    int64_t count;
    size_t piece_elements;  // 0: default pieces
  };
  // n-1 and n+1 are not divisible by n (for n > 2); 5n+3 in two-element pieces gives every block
  // several pieces of unequal sizes, and the tree algorithms many segments.
  const CountCase cases[] = {{0, 0}, {1, 0}, {n - 1, 0}, {n + 1, 0}, {5 * n + 3, 2}};
  for (const NamedAllreduce& algorithm : kAlgorithms) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (!CheckReduction(dtype, op).ok()) continue;  // integer avg: see BadArguments
        for (const CountCase& c : cases) {
          RunCase(algorithm, c.count, dtype, op, c.piece_elements * DTypeSize(dtype));
        }
      }
    }
  }
}

// 1000003 elements: many pieces per block and segments for every algorithm. Each world size runs
// two (dtype, op) pairs, rotating so that across the sizes every dtype and op is covered.
TEST_P(AllreduceTest, MillionElements) {
  const int n = world_size();
  const int64_t count = kSanitized ? 100003 : 1000003;
  for (int k = 0; k < 2; ++k) {
    const DType dtype = kDTypes[(2 * n + k) % std::size(kDTypes)];
    ReduceOp op = kOps[(2 * n + k) % std::size(kOps)];
    if (!CheckReduction(dtype, op).ok()) op = ReduceOp::kMax;
    for (const NamedAllreduce& algorithm : kAlgorithms) {
      RunCase(algorithm, count, dtype, op, 0);
    }
  }
}

// Inexact inputs (random floats): the algorithms combine in different orders, so results differ
// between algorithms, but every rank of one algorithm must end with the same bits.
TEST_P(AllreduceTest, RandomFloatsGiveTheSameBitsOnEveryRank) {
  const int n = world_size();
  const int64_t count = 37 * n + 5;
  for (const NamedAllreduce& algorithm : kAlgorithms) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd}) {
        RankGroup& group = this->group();
        const uint64_t seq = group.NextSeq();
        std::vector<std::vector<uint8_t>> data(n);
        const std::vector<absl::Status> statuses = group.Run([&](int rank) {
          data[rank].resize(count * DTypeSize(dtype));
          for (int64_t i = 0; i < count; ++i) {
            const uint64_t h = testutil::Mix(seq, rank, i);
            const double x = (static_cast<double>(h >> 11) / 9007199254740992.0 - 0.5) * 3.0;
            testutil::StoreElement(dtype, x, data[rank].data() + i * DTypeSize(dtype));
          }
          AlgorithmContext ctx = group.Context(rank, "allreduce", seq);
          ctx.set_piece_bytes(8 * DTypeSize(dtype));
          return algorithm.fn(ctx, data[rank].data(), count, dtype, op);
        });
        ASSERT_TRUE(testutil::AllOk(statuses)) << testutil::DescribeFailures(statuses);
        for (int rank = 1; rank < n; ++rank) {
          EXPECT_EQ(data[rank], data[0])
              << algorithm.name << " " << DTypeName(dtype) << " " << ReduceOpName(op) << ": rank "
              << rank << " differs from rank 0";
        }
      }
    }
  }
}

// Invalid requests fail on every rank with kInvalidArgument before any message is sent, so the
// transports stay usable: the allreduce after them succeeds.
TEST_P(AllreduceTest, BadArgumentsFailEverywhereAndLeaveTheLinkUsable) {
  const int n = world_size();
  RankGroup& group = this->group();
  for (const NamedAllreduce& algorithm : kAlgorithms) {
    const uint64_t seq = group.NextSeq();
    const std::vector<absl::Status> statuses = group.Run([&](int rank) -> absl::Status {
      int32_t x[4] = {1, 2, 3, 4};
      AlgorithmContext ctx = group.Context(rank, "allreduce", seq);
      absl::Status avg = algorithm.fn(ctx, x, 4, DType::kInt32, ReduceOp::kAvg);
      if (avg.code() != absl::StatusCode::kInvalidArgument) return absl::InternalError("int avg");
      if (avg.message().find(absl::StrCat("rank ", rank, "/", n)) == std::string::npos ||
          avg.message().find("allreduce #") == std::string::npos) {
        return absl::InternalError(absl::StrCat("no rank/op context in: ", avg.ToString()));
      }
      if (algorithm.fn(ctx, x, -1, DType::kInt32, ReduceOp::kSum).code() !=
          absl::StatusCode::kInvalidArgument) {
        return absl::InternalError("negative count accepted");
      }
      if (algorithm.fn(ctx, nullptr, 4, DType::kInt32, ReduceOp::kSum).code() !=
          absl::StatusCode::kInvalidArgument) {
        return absl::InternalError("null buffer accepted");
      }
      if (algorithm.fn(ctx, x, 4, DType::kBool, ReduceOp::kMax).code() !=
          absl::StatusCode::kInvalidArgument) {
        return absl::InternalError("bool accepted");
      }
      return absl::OkStatus();
    });
    ASSERT_TRUE(testutil::AllOk(statuses))
        << algorithm.name << testutil::DescribeFailures(statuses);
    RunCase(algorithm, n + 1, DType::kInt32, ReduceOp::kSum, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(TransportsAndWorldSizes, AllreduceTest,
                         ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                                              TransportKind::kInProcess),
                                            ::testing::Range(1, 9)),
                         [](const ::testing::TestParamInfo<std::tuple<TransportKind, int>>& info) {
                           return absl::StrCat(testutil::TransportKindName(std::get<0>(info.param)),
                                               "_n", std::get<1>(info.param));
                         });

// 64 MiB per rank (8 MiB under sanitizers) over TCP, for two combinations only: the sweep above
// covers the rest.
TEST(AllreduceLargeTest, SixtyFourMiB) {
  const int64_t bytes = kSanitized ? (int64_t{8} << 20) : (int64_t{64} << 20);
  RankGroups groups;
  struct LargeCase {
    int world_size;
    NamedAllreduce algorithm;
    DType dtype;
    ReduceOp op;
  };
  const LargeCase cases[] = {{4, kAlgorithms[0], DType::kFloat32, ReduceOp::kSum},
                             {3, kAlgorithms[2], DType::kBFloat16, ReduceOp::kAvg}};
  for (const LargeCase& c : cases) {
    const int64_t count = bytes / static_cast<int64_t>(DTypeSize(c.dtype));
    RankGroup& group = groups.Get(TransportKind::kTcp, c.world_size);
    const uint64_t seq = group.NextSeq();
    std::vector<std::vector<uint8_t>> data(c.world_size);
    const std::vector<absl::Status> statuses = group.Run([&](int rank) {
      data[rank] = testutil::MakeReductionInput(seq, rank, count, c.dtype, c.op);
      return c.algorithm.fn(group.Context(rank, "allreduce", seq), data[rank].data(), count,
                            c.dtype, c.op);
    });
    ASSERT_TRUE(testutil::AllOk(statuses)) << testutil::DescribeFailures(statuses);
    const std::vector<uint8_t> want =
        testutil::ExpectedReduction(seq, c.world_size, count, c.dtype, c.op);
    for (int rank = 0; rank < c.world_size; ++rank) {
      EXPECT_EQ(testutil::CompareElements(data[rank], want, c.dtype), "")
          << c.algorithm.name << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace paddle
