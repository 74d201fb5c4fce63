// bench/collectives: the rows built from the ranks' "ROW ..." lines and the per-size run counts.
#include "bench/collectives/report.h"

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

}  // namespace
}  // namespace bench
}  // namespace paddle
