// What the allreduce algorithms do when a rank fails (over TCP and the in-process transport): a
// rank that aborts in the middle of the operation makes every other rank fail promptly (not at the
// deadline) with an error that names the operation and the failed rank; a rank that never joins
// makes the others fail at their deadline with the op, the time waited and the setting to change.
// Under ASan these cases also check that buffers of requests still pending at the failure are not
// written after the algorithm returns (PeerMessage drains them).
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/algorithms/halving_doubling_allreduce.h"
#include "paddle/collective/algorithms/ring_allreduce.h"
#include "paddle/collective/algorithms/tree_allreduce.h"
#include "tests/collective/algorithms/intercepting_transport.h"
#include "tests/collective/algorithms/rank_group.h"

namespace paddle {
namespace {

using AllreduceFn = absl::Status (*)(const AlgorithmContext&, void*, int64_t, DType, ReduceOp);

struct NamedAllreduce {
  const char* name;
  AllreduceFn fn;
};

constexpr NamedAllreduce kAlgorithms[] = {
    {"ring", RingAllreduce}, {"tree", TreeAllreduce}, {"hd", HalvingDoublingAllreduce}};

class FailureTest
    : public ::testing::TestWithParam<std::tuple<testutil::TransportKind, NamedAllreduce>> {
 protected:
  testutil::TransportKind kind() const { return std::get<0>(GetParam()); }
  const NamedAllreduce& algorithm() const { return std::get<1>(GetParam()); }
};

// 5 ranks (not a power of two: the doubling algorithms fold rank 2 into rank 3). Rank 2 aborts its
// transport when it posts its third send, as a crash would close its links.
TEST_P(FailureTest, PeerAbortingMidAllreduceFailsEveryRankNamingOpAndPeer) {
  constexpr int kWorld = 5;
  constexpr int kVictim = 2;
  constexpr int64_t kCount = 200003;
  const NamedAllreduce& algorithm = this->algorithm();
  absl::StatusOr<std::unique_ptr<testutil::RankGroup>> group =
      testutil::RankGroup::Create(kWorld, kind());
  ASSERT_TRUE(group.ok()) << group.status();
  testutil::InterceptingTransport victim((*group)->transport(kVictim));
  victim.AbortAtSend(2, absl::AbortedError("rank 2 crashed (simulated by the test)"));
  const uint64_t seq = (*group)->NextSeq();
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = (*group)->Run([&](int rank) {
    std::vector<float> data(kCount, 1.0f);
    Transport& transport =
        rank == kVictim ? static_cast<Transport&>(victim) : (*group)->transport(rank);
    AlgorithmContext ctx(transport, "allreduce", seq, Deadline::After(testutil::kGenerousTimeout));
    ctx.set_piece_bytes(16 << 10);  // many messages, so the abort lands mid-way
    return algorithm.fn(ctx, data.data(), kCount, DType::kFloat32, ReduceOp::kSum);
  });
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(60)) << "the failure took as long as a timeout";
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_FALSE(statuses[rank].ok()) << algorithm.name << ": rank " << rank << " succeeded";
    const std::string message = statuses[rank].ToString();
    EXPECT_NE(message.find(absl::StrCat("allreduce #", seq)), std::string::npos)
        << algorithm.name << ", rank " << rank << ": " << message;
    EXPECT_NE(message.find(absl::StrCat("rank ", rank, "/", kWorld)), std::string::npos)
        << algorithm.name << ", rank " << rank << ": " << message;
    // The failed rank is named, in the context of the failing message or in the transport's
    // cause that every pending request of the poisoned transport carries.
    EXPECT_NE(message.find("rank 2"), std::string::npos)
        << algorithm.name << ", rank " << rank << ": " << message;
    EXPECT_NE(statuses[rank].code(), absl::StatusCode::kDeadlineExceeded) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    TransportsAndAlgorithms, FailureTest,
    ::testing::Combine(::testing::Values(testutil::TransportKind::kTcp,
                                         testutil::TransportKind::kInProcess),
                       ::testing::ValuesIn(kAlgorithms)),
    [](const ::testing::TestParamInfo<std::tuple<testutil::TransportKind, NamedAllreduce>>& info) {
      return absl::StrCat(testutil::TransportKindName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param).name);
    });

// Rank 2 never calls the allreduce: the others fail at their (short) deadline with the op, the
// time waited and the knob to turn, and the transport is poisoned so nothing is left pending.
class DeadlineTest : public ::testing::TestWithParam<testutil::TransportKind> {};

TEST_P(DeadlineTest, MissingRankTimesOutWithAnActionableError) {
  constexpr int kWorld = 3;
  absl::StatusOr<std::unique_ptr<testutil::RankGroup>> group =
      testutil::RankGroup::Create(kWorld, GetParam());
  ASSERT_TRUE(group.ok()) << group.status();
  const uint64_t seq = (*group)->NextSeq();
  const std::vector<absl::Status> statuses = (*group)->Run([&](int rank) -> absl::Status {
    if (rank == 2) return absl::OkStatus();
    std::vector<float> data(1000, 1.0f);
    AlgorithmContext ctx((*group)->transport(rank), "allreduce", seq,
                         Deadline::After(absl::Milliseconds(500)));
    return RingAllreduce(ctx, data.data(), 1000, DType::kFloat32, ReduceOp::kSum);
  });
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status& s = statuses[rank];
    ASSERT_FALSE(s.ok()) << "rank " << rank;
    const std::string message = s.ToString();
    // The first rank to time out aborts its transport, so its peer may fail with that cause.
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      EXPECT_NE(message.find("PADDLE_TIMEOUT_S"), std::string::npos) << message;
      EXPECT_NE(message.find("waited"), std::string::npos) << message;
    }
    EXPECT_NE(message.find(absl::StrCat("allreduce #", seq)), std::string::npos) << message;
    EXPECT_NE(message.find("ring reduce-scatter step "), std::string::npos) << message;
  }
  EXPECT_TRUE(statuses[0].code() == absl::StatusCode::kDeadlineExceeded ||
              statuses[1].code() == absl::StatusCode::kDeadlineExceeded)
      << testutil::DescribeFailures(statuses);
}

INSTANTIATE_TEST_SUITE_P(Transports, DeadlineTest,
                         ::testing::Values(testutil::TransportKind::kTcp,
                                           testutil::TransportKind::kInProcess),
                         [](const ::testing::TestParamInfo<testutil::TransportKind>& info) {
                           return std::string(testutil::TransportKindName(info.param));
                         });

}  // namespace
}  // namespace paddle
