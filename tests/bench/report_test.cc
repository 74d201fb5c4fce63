// bench/collectives: the rows built from the ranks' "ROW ..." lines, the per-size run counts, the
// latency percentiles and the element check of alltoall.
#include "bench/collectives/report.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bench/collectives/bench_inputs.h"
#include "gtest/gtest.h"

namespace paddle {
namespace bench {
namespace {

Row Like(int nproc) {
  Row like;
  like.op = "allreduce";
  like.backend = "native";
  like.nproc = nproc;
  like.dtype = "float32";
  return like;
}

TEST(CollectRowsTest, TakesTheSlowestRankAndSumsWrongElements) {
  const std::vector<std::string> outputs = {
      "noise\nROW rank=0 bytes=4096 count=1024 time_us=2.0 p50_us=1.5 max_us=30.0 wrong=0\n",
      "ROW rank=1 bytes=4096 count=1024 time_us=4.0 p50_us=1.0 max_us=9.0 wrong=3\n"};
  absl::StatusOr<std::vector<Row>> rows = CollectRows(outputs, BenchOp::kAllreduce, Like(2));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  const Row& row = (*rows)[0];
  EXPECT_EQ(row.bytes, 4096);
  EXPECT_EQ(row.count, 1024);
  EXPECT_DOUBLE_EQ(row.time_us, 4.0);
  EXPECT_DOUBLE_EQ(row.p50_us, 1.5);
  EXPECT_DOUBLE_EQ(row.max_us, 30.0);
  EXPECT_EQ(row.wrong, 3);
  EXPECT_DOUBLE_EQ(row.algbw_gbs, 4096 / 4.0e3);
  EXPECT_DOUBLE_EQ(row.busbw_gbs, row.algbw_gbs);  // 2(n-1)/n = 1 for n = 2
}

TEST(CollectRowsTest, ReadsTheFastestAndThe99thPercentileOfTheSlowestRank) {
  const std::vector<std::string> outputs = {
      "ROW rank=0 bytes=64 count=16 time_us=2.0 p50_us=1.5 max_us=30.0 min_us=1.0 p99_us=20.0 "
      "wrong=0\n",
      "ROW rank=1 bytes=64 count=16 time_us=4.0 p50_us=1.0 max_us=9.0 min_us=0.5 p99_us=8.0 "
      "wrong=0\n"};
  absl::StatusOr<std::vector<Row>> rows = CollectRows(outputs, BenchOp::kAlltoall, Like(2));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_DOUBLE_EQ((*rows)[0].min_us, 1.0);
  EXPECT_DOUBLE_EQ((*rows)[0].p99_us, 20.0);
  EXPECT_DOUBLE_EQ((*rows)[0].busbw_gbs, (*rows)[0].algbw_gbs * 0.5);  // (n-1)/n for alltoall

  absl::StatusOr<std::vector<Row>> bad =
      CollectRows({"ROW rank=0 bytes=8 count=2 time_us=1.0 p99_us=slow wrong=0\n"},
                  BenchOp::kAllreduce, Like(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p99_us=slow"), std::string::npos) << bad.status();
}

TEST(LatenciesTest, NearestRankPercentiles) {
  std::vector<double> us;
  for (int i = 1; i <= 200; ++i) us.push_back(i);
  LatencyStats s = Latencies(us);
  EXPECT_DOUBLE_EQ(s.min_us, 1);
  EXPECT_DOUBLE_EQ(s.p50_us, 101);  // element n/2, as the tables have always taken it
  EXPECT_DOUBLE_EQ(s.p99_us, 198);  // ceil(0.99 * 200) = 198th smallest
  EXPECT_DOUBLE_EQ(s.max_us, 200);
  // 20 operations (a large size's count): p99 is the slowest one.
  s = Latencies(std::vector<double>(us.begin(), us.begin() + 20));
  EXPECT_DOUBLE_EQ(s.p99_us, 20);
  s = Latencies({7.0});
  EXPECT_DOUBLE_EQ(s.p99_us, 7);
  EXPECT_DOUBLE_EQ(s.min_us, 7);
  s = Latencies({});
  EXPECT_DOUBLE_EQ(s.max_us, 0);
}

// Alltoall across 3 ranks made by hand from the inputs: block j of rank r's output is block r of
// rank j's input. CountWrong accepts it and counts each element changed.
TEST(CountWrongTest, AlltoallBlocksComeFromEachRank) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 12, kBlock = kCount / kRanks;
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount));
  for (int r = 0; r < kRanks; ++r) FillInput(DType::kFloat32, 5, r, 0, kCount, in[r].data());
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> out(kCount);
    for (int j = 0; j < kRanks; ++j) {
      std::memcpy(&out[j * kBlock], &in[j][r * kBlock], kBlock * sizeof(float));
    }
    EXPECT_EQ(CountWrong(BenchOp::kAlltoall, DType::kFloat32, 5, r, kRanks, kCount, out.data()), 0)
        << "rank " << r;
    out[0] += 100;
    out[kCount - 1] += 100;
    EXPECT_EQ(CountWrong(BenchOp::kAlltoall, DType::kFloat32, 5, r, kRanks, kCount, out.data()), 2);
  }
  BenchOp op;
  ASSERT_TRUE(ParseBenchOp("alltoall", &op));
  EXPECT_EQ(op, BenchOp::kAlltoall);
  EXPECT_TRUE(SplitsByRank(BenchOp::kAlltoall));
  EXPECT_FALSE(SplitsByRank(BenchOp::kBroadcast));
}

// Note [Sparse large inputs]: past kDenseElements only every kSparseStride-th chunk is drawn;
// the rest is 0, whatever range or size asks for it, and the check still sees every element.
TEST(CountWrongTest, LargeInputsAreSparseAndStillFullyChecked) {
  constexpr int64_t kCount = kDenseElements + 2 * kSparseStride * kInputChunk;
  std::vector<float> in0(kCount), in1(kCount), sum(kCount);
  FillInput(DType::kFloat32, 9, 0, 0, kCount, in0.data());
  FillInput(DType::kFloat32, 9, 1, 0, kCount, in1.data());
  int64_t zeros_past_dense = 0;
  for (int64_t i = kDenseElements - 5; i < kCount; ++i) {
    if (!InputIsDrawn(i)) {
      ASSERT_EQ(in0[i], 0.0f) << "element " << i;
      ++zeros_past_dense;
    }
  }
  EXPECT_EQ(zeros_past_dense, 2 * (kSparseStride - 1) * kInputChunk);
  EXPECT_TRUE(InputIsDrawn(kDenseElements + kSparseStride * kInputChunk));
  // Any range is the same elements as the whole input: a prefix stays right for larger sizes.
  const int64_t begin = kDenseElements - 7;
  std::vector<float> part(3 * kInputChunk + 11);
  FillInput(DType::kFloat32, 9, 0, begin, static_cast<int64_t>(part.size()), part.data());
  EXPECT_EQ(0, std::memcmp(part.data(), &in0[begin], part.size() * sizeof(float)));

  for (int64_t i = 0; i < kCount; ++i) sum[i] = in0[i] + in1[i];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(CountWrong(BenchOp::kAllreduce, DType::kFloat32, 9, r, 2, kCount, sum.data()), 0);
  }
  // A drawn chunk delivered one chunk late (a misplaced block) is caught, zeros included.
  std::vector<float> shifted = sum;
  const int64_t drawn = kDenseElements + kSparseStride * kInputChunk;
  std::copy(&sum[drawn], &sum[drawn] + kInputChunk, &shifted[drawn + kInputChunk]);
  std::fill(&shifted[drawn], &shifted[drawn] + kInputChunk, 0.0f);
  int64_t differ = 0;
  for (int64_t i = 0; i < kCount; ++i) differ += shifted[i] != sum[i];
  EXPECT_EQ(CountWrong(BenchOp::kAllreduce, DType::kFloat32, 9, 0, 2, kCount, shifted.data()),
            differ);
  EXPECT_GT(differ, kInputChunk / 2);
  // Alltoall of two ranks: block j of rank 1's output is block 1 of rank j's input.
  std::vector<float> out(kCount);
  const int64_t block = kCount / 2;
  std::memcpy(out.data(), &in0[block], block * sizeof(float));
  std::memcpy(&out[block], &in1[block], block * sizeof(float));
  EXPECT_EQ(CountWrong(BenchOp::kAlltoall, DType::kFloat32, 9, 1, 2, kCount, out.data()), 0);
}

TEST(CollectRowsTest, MedianAndMaximumAreOptional) {
  const std::vector<std::string> outputs = {
      "ROW rank=0 bytes=8 count=2 time_us=1.0 wrong=0\n"
      "ROW rank=1 bytes=8 count=2 time_us=1.0 wrong=0\n"
      "ROW rank=2 bytes=8 count=2 time_us=2.0 wrong=0\n"
      "ROW rank=3 bytes=8 count=2 time_us=1.0 wrong=0\n"};
  absl::StatusOr<std::vector<Row>> rows = CollectRows(outputs, BenchOp::kAllreduce, Like(4));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_DOUBLE_EQ((*rows)[0].p50_us, 0);
  EXPECT_DOUBLE_EQ((*rows)[0].busbw_gbs, 8 / 2.0e3 * 1.5);
}

TEST(CollectRowsTest, MalformedFieldsAndMissingRanksAreErrors) {
  absl::StatusOr<std::vector<Row>> bad_median =
      CollectRows({"ROW rank=0 bytes=8 count=2 time_us=1.0 p50_us=fast wrong=0\n"},
                  BenchOp::kAllreduce, Like(1));
  ASSERT_FALSE(bad_median.ok());
  EXPECT_NE(bad_median.status().message().find("p50_us=fast"), std::string::npos)
      << bad_median.status();

  absl::StatusOr<std::vector<Row>> missing = CollectRows(
      {"ROW rank=0 bytes=8 count=2 time_us=1.0 wrong=0\n"}, BenchOp::kAllreduce, Like(2));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("1 of 2 ranks"), std::string::npos) << missing.status();
}

TEST(IterationsForTest, SmallMessagesRunMoreTimesUpToSixteenfold) {
  EXPECT_EQ(IterationsFor(20, 4096), 320);
  EXPECT_EQ(IterationsFor(20, 1024), 320);  // capped at 16x
  EXPECT_EQ(IterationsFor(20, 16384), 80);
  EXPECT_EQ(IterationsFor(20, 40000), 20);  // 64 KiB / 40000 rounds down to 1
  EXPECT_EQ(IterationsFor(20, 64 << 10), 20);
  EXPECT_EQ(IterationsFor(20, 256 << 20), 20);
  EXPECT_EQ(IterationsFor(5, 0), 80);
}

Row Timed(int64_t bytes, double time_us, double p50_us, double max_us, int64_t wrong) {
  Row row = Like(4);
  row.bytes = bytes;
  row.time_us = time_us;
  row.p50_us = p50_us;
  row.max_us = max_us;
  row.wrong = wrong;
  return row;
}

TEST(MedianOfRoundsTest, TakesTheMedianRoundPerSizeAndKeepsTheWorstOfTheRest) {
  const std::vector<std::vector<Row>> rounds = {
      {Timed(4096, 10, 9, 50, 0), Timed(8192, 40, 30, 90, 0)},
      {},  // a round whose run failed
      {Timed(4096, 30, 20, 70, 1), Timed(8192, 20, 10, 30, 0)},
      {Timed(4096, 20, 15, 900, 0)}};  // this round lacks 8192: that size is dropped
  std::vector<Row> rows = MedianOfRounds(rounds, BenchOp::kAllreduce);
  ASSERT_EQ(rows.size(), 1u);
  const Row& row = rows[0];
  EXPECT_EQ(row.bytes, 4096);
  EXPECT_DOUBLE_EQ(row.time_us, 20);
  EXPECT_DOUBLE_EQ(row.p50_us, 15);
  EXPECT_DOUBLE_EQ(row.max_us, 900);
  EXPECT_EQ(row.wrong, 1);
  EXPECT_DOUBLE_EQ(row.algbw_gbs, 4096 / 20.0e3);
  EXPECT_DOUBLE_EQ(row.busbw_gbs, row.algbw_gbs * 1.5);  // 2(n-1)/n for n = 4

  // An even number of rounds averages the middle two.
  rows =
      MedianOfRounds({{Timed(4096, 10, 1, 1, 0)}, {Timed(4096, 30, 3, 1, 0)}}, BenchOp::kAllreduce);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].time_us, 20);
  EXPECT_DOUBLE_EQ(rows[0].p50_us, 2);
  EXPECT_TRUE(MedianOfRounds({{}, {}}, BenchOp::kAllreduce).empty());
}

}  // namespace
}  // namespace bench
}  // namespace paddle
