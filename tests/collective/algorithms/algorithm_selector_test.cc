// Tests of AlgorithmSelector: the size table, PADDLE_ALGO (honoured, checked by the message
// pattern the chosen algorithm puts on the wire, and rejected with a clear error when bad), and
// the dispatch running the chosen algorithm (over the in-process transport: these tests are about
// the choice; the algorithms' own tests cover TCP).
#include "paddle/collective/algorithms/algorithm_selector.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/collective/algorithms/intercepting_transport.h"
#include "tests/collective/algorithms/rank_group.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

using testutil::InterceptingTransport;

TEST(AlgorithmSelectorTest, TableBySizeAndWorldSize) {
  const AlgorithmSelector table;
  EXPECT_FALSE(table.forced().has_value());
  EXPECT_EQ(table.ForAllreduce(0, 8), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(4096, 8), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(4096, 5), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(256 << 10, 8), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(256 << 10, 3), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce((256 << 10) + 4, 8), Algorithm::kHalvingDoubling);
  EXPECT_EQ(table.ForAllreduce((256 << 10) + 4, 3), Algorithm::kRing);
  // Beyond 8 ranks the tree stops at 64 KiB.
  EXPECT_EQ(TreeMaxBytes(8), 256 << 10);
  EXPECT_EQ(TreeMaxBytes(9), 64 << 10);
  EXPECT_EQ(table.ForAllreduce(64 << 10, 16), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(128 << 10, 16), Algorithm::kHalvingDoubling);
  EXPECT_EQ(table.ForAllreduce(128 << 10, 12), Algorithm::kRing);
  EXPECT_EQ(table.ForAllreduce(1 << 20, 8), Algorithm::kHalvingDoubling);
  EXPECT_EQ(table.ForAllreduce(1 << 20, 6), Algorithm::kRing);  // the fold would cost 2N
  EXPECT_EQ(table.ForAllreduce(int64_t{64} << 20, 8), Algorithm::kRing);
  EXPECT_EQ(table.ForBroadcast(100, 8), Algorithm::kTree);
  EXPECT_EQ(table.ForBroadcast(int64_t{64} << 20, 8), Algorithm::kRing);
}

// Ranks sharing cores: halving-doubling above the tree, except on 3 ranks, which keep the ring.
TEST(AlgorithmSelectorTest, SharedCoresTable) {
  const AlgorithmSelector table(AllreduceTable::kSharedCores);
  EXPECT_EQ(table.table(), AllreduceTable::kSharedCores);
  EXPECT_EQ(AlgorithmSelector().table(), AllreduceTable::kCorePerRank);
  EXPECT_EQ(table.ForAllreduce(4096, 4), Algorithm::kTree);
  EXPECT_EQ(table.ForAllreduce(256 << 10, 4), Algorithm::kTree);
  for (int64_t bytes :
       {(int64_t{256} << 10) + 4, int64_t{4} << 20, int64_t{64} << 20, int64_t{1} << 40}) {
    for (int n : {2, 4, 5, 6, 7, 8, 12, 16}) {
      EXPECT_EQ(table.ForAllreduce(bytes, n), Algorithm::kHalvingDoubling) << bytes << " " << n;
    }
    EXPECT_EQ(table.ForAllreduce(bytes, 3), Algorithm::kRing) << bytes;
  }
  // Broadcast has one table.
  EXPECT_EQ(table.ForBroadcast(int64_t{64} << 20, 8), Algorithm::kRing);
  EXPECT_EQ(table.ForBroadcast(100, 8), Algorithm::kTree);
}

TEST(AlgorithmSelectorTest, TableNamesRoundTrip) {
  for (AllreduceTable t : {AllreduceTable::kCorePerRank, AllreduceTable::kSharedCores}) {
    absl::StatusOr<AllreduceTable> parsed = ParseAllreduceTable(AllreduceTableName(t));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
  }
  absl::StatusOr<AllreduceTable> bad = ParseAllreduceTable("fastest");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"fastest\""), std::string::npos) << bad.status();
}

TEST(AlgorithmSelectorTest, ForcedAlgorithmWinsOverTheTable) {
  const AlgorithmSelector hd(Algorithm::kHalvingDoubling);
  EXPECT_EQ(hd.ForAllreduce(4, 8), Algorithm::kHalvingDoubling);
  EXPECT_EQ(hd.ForAllreduce(int64_t{1} << 30, 3), Algorithm::kHalvingDoubling);
  EXPECT_EQ(hd.ForBroadcast(int64_t{1} << 30, 8), Algorithm::kTree);  // no hd broadcast
  EXPECT_EQ(AlgorithmSelector(Algorithm::kRing).ForBroadcast(4, 8), Algorithm::kRing);
  EXPECT_EQ(AlgorithmSelector(Algorithm::kTree).ForAllreduce(int64_t{1} << 30, 8),
            Algorithm::kTree);
}

TEST(AlgorithmSelectorTest, NamesRoundTrip) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling}) {
    absl::StatusOr<Algorithm> parsed = ParseAlgorithm(AlgorithmName(a));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_EQ(*ParseAlgorithm(" RING "), Algorithm::kRing);
}

TEST(AlgorithmSelectorTest, EnvironmentUnsetOrEmptyMeansTheTable) {
  {
    ScopedEnv env(kAlgorithmEnvVar, nullptr);
    absl::StatusOr<AlgorithmSelector> s = AlgorithmSelector::FromEnv();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_FALSE(s->forced().has_value());
  }
  ScopedEnv env(kAlgorithmEnvVar, "");
  absl::StatusOr<AlgorithmSelector> s = AlgorithmSelector::FromEnv();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->forced().has_value());
}

TEST(AlgorithmSelectorTest, BadEnvironmentValueIsAClearError) {
  ScopedEnv env(kAlgorithmEnvVar, "butterfly");
  absl::StatusOr<AlgorithmSelector> s = AlgorithmSelector::FromEnv();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.status().message());
  EXPECT_NE(message.find("PADDLE_ALGO=\"butterfly\""), std::string::npos) << message;
  for (const char* valid : {"ring", "tree", "hd", "unset it"}) {
    EXPECT_NE(message.find(valid), std::string::npos) << message;
  }
}

// PADDLE_ALGO=x makes Allreduce run x, seen from the sends of rank 0 on 4 ranks for a 4000-byte
// buffer (which the table gives to the tree):
//   ring: 1000-byte pieces to rank 1 only;  tree: the whole 4000 bytes to rank 1, then rank 2;
//   hd:   2000 bytes to rank 2 (halving), then 1000 to rank 1, then the allgather back.
TEST(AlgorithmSelectorTest, EnvironmentOverrideIsHonoured) {
  constexpr int kWorld = 4;
  constexpr int64_t kCount = 1000;
  struct Expectation {
    const char* env;
    std::vector<InterceptingTransport::SentMessage> rank0_sends;
  };
  const Expectation expectations[] = {
      {"ring", {{1, 1000}, {1, 1000}, {1, 1000}, {1, 1000}, {1, 1000}, {1, 1000}}},
      {"tree", {{1, 4000}, {2, 4000}}},
      {"hd", {{2, 2000}, {1, 1000}, {1, 1000}, {2, 2000}}},
      {"", {{1, 4000}, {2, 4000}}},  // unset: the table's choice for 4000 bytes
  };
  // In-process: the test is about which algorithm runs, not the transport (and it runs under TSan).
  absl::StatusOr<std::unique_ptr<testutil::RankGroup>> group =
      testutil::RankGroup::Create(kWorld, testutil::TransportKind::kInProcess);
  ASSERT_TRUE(group.ok()) << group.status();
  for (const Expectation& e : expectations) {
    ScopedEnv env(kAlgorithmEnvVar, e.env);
    absl::StatusOr<AlgorithmSelector> selector = AlgorithmSelector::FromEnv();
    ASSERT_TRUE(selector.ok()) << selector.status();
    const uint64_t seq = (*group)->NextSeq();
    std::vector<std::unique_ptr<InterceptingTransport>> transports;
    for (int rank = 0; rank < kWorld; ++rank) {
      transports.push_back(std::make_unique<InterceptingTransport>((*group)->transport(rank)));
    }
    std::vector<std::vector<uint8_t>> data(kWorld);
    const std::vector<absl::Status> statuses = (*group)->Run([&](int rank) {
      data[rank] = testutil::MakeReductionInput(seq, rank, kCount, DType::kFloat32, ReduceOp::kSum);
      AlgorithmContext ctx(*transports[rank], "allreduce", seq,
                           Deadline::After(testutil::kGenerousTimeout));
      return selector->Allreduce(ctx, data[rank].data(), kCount, DType::kFloat32, ReduceOp::kSum);
    });
    ASSERT_TRUE(testutil::AllOk(statuses)) << e.env << testutil::DescribeFailures(statuses);
    const std::vector<uint8_t> want =
        testutil::ExpectedReduction(seq, kWorld, kCount, DType::kFloat32, ReduceOp::kSum);
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_EQ(testutil::CompareElements(data[rank], want, DType::kFloat32), "") << e.env;
    }
    const std::vector<InterceptingTransport::SentMessage> sends = transports[0]->sends();
    ASSERT_EQ(sends.size(), e.rank0_sends.size()) << "PADDLE_ALGO=" << e.env;
    for (size_t i = 0; i < sends.size(); ++i) {
      EXPECT_EQ(sends[i].peer, e.rank0_sends[i].peer) << "PADDLE_ALGO=" << e.env << " send " << i;
      EXPECT_EQ(sends[i].bytes, e.rank0_sends[i].bytes) << "PADDLE_ALGO=" << e.env << " send " << i;
    }
  }
}

// The broadcast dispatch, both ways.
TEST(AlgorithmSelectorTest, BroadcastDispatch) {
  absl::StatusOr<std::unique_ptr<testutil::RankGroup>> group =
      testutil::RankGroup::Create(3, testutil::TransportKind::kInProcess);
  ASSERT_TRUE(group.ok()) << group.status();
  for (Algorithm forced : {Algorithm::kRing, Algorithm::kTree}) {
    const AlgorithmSelector selector(forced);
    const uint64_t seq = (*group)->NextSeq();
    std::vector<std::vector<uint8_t>> data(3);
    const std::vector<absl::Status> statuses = (*group)->Run([&](int rank) {
      data[rank] = rank == 2 ? testutil::MakeBytes(seq, 2, 999) : std::vector<uint8_t>(999);
      return selector.Broadcast((*group)->Context(rank, "broadcast", seq), data[rank].data(), 999,
                                DType::kUInt8, 2);
    });
    ASSERT_TRUE(testutil::AllOk(statuses)) << testutil::DescribeFailures(statuses);
    EXPECT_TRUE(data[0] == data[2] && data[1] == data[2]) << AlgorithmName(forced);
  }
}

}  // namespace
}  // namespace paddle
