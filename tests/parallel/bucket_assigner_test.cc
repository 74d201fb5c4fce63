// Tests of AssignBuckets / AssignBucketsInOrder: reverse order, caps, dtype runs, oversized
// parameters, explicit orders, and the argument errors.
#include "paddle/parallel/reducer/bucket_assigner.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF64 = DType::kFloat64;

TEST(BucketAssignerTest, ReverseOrderFirstBucketSmall) {
  // Five params of 100 bytes; first cap 200, later 300.
  std::vector<BucketParam> params(5, BucketParam{100, kF32});
  absl::StatusOr<BucketLayout> layout = AssignBuckets(params, {200, 300});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(4, 3), ElementsAre(2, 1, 0)));
}

TEST(BucketAssignerTest, OversizedParameterGetsItsOwnBucket) {
  std::vector<BucketParam> params = {{10, kF32}, {1000, kF32}, {10, kF32}, {10, kF32}};
  absl::StatusOr<BucketLayout> layout = AssignBuckets(params, {50, 50});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(3, 2), ElementsAre(1), ElementsAre(0)));
}

TEST(BucketAssignerTest, DTypeChangeClosesBucket) {
  std::vector<BucketParam> params = {{8, kF32}, {8, kF64}, {8, kF64}, {8, kF32}};
  absl::StatusOr<BucketLayout> layout = AssignBuckets(params, {1 << 20, 1 << 20});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(3), ElementsAre(2, 1), ElementsAre(0)));
}

TEST(BucketAssignerTest, EverythingFitsInOneBucket) {
  std::vector<BucketParam> params(3, BucketParam{4, kF32});
  absl::StatusOr<BucketLayout> layout = AssignBuckets(params, {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(2, 1, 0)));
}

TEST(BucketAssignerTest, ExactCapStaysInOneBucket) {
  std::vector<BucketParam> params(4, BucketParam{25, kF32});
  absl::StatusOr<BucketLayout> layout = AssignBuckets(params, {100, 10});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(3, 2, 1, 0)));
}

TEST(BucketAssignerTest, NoParametersNoBuckets) {
  absl::StatusOr<BucketLayout> layout = AssignBuckets({}, {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->empty());
}

TEST(BucketAssignerTest, ExplicitOrder) {
  std::vector<BucketParam> params(4, BucketParam{100, kF32});
  const std::vector<int64_t> order = {1, 3, 0, 2};
  absl::StatusOr<BucketLayout> layout = AssignBucketsInOrder(params, order, {100, 200});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(*layout, ElementsAre(ElementsAre(1), ElementsAre(3, 0), ElementsAre(2)));
}

TEST(BucketAssignerTest, RejectsBadOrders) {
  std::vector<BucketParam> params(3, BucketParam{4, kF32});
  const std::vector<int64_t> short_order = {0, 1};
  const std::vector<int64_t> repeated = {0, 1, 1};
  const std::vector<int64_t> outside = {0, 1, 3};
  absl::Status s = AssignBucketsInOrder(params, short_order, {}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("2 entries for 3 parameters"));
  s = AssignBucketsInOrder(params, repeated, {}).status();
  EXPECT_THAT(s.message(), HasSubstr("parameter 1 twice"));
  s = AssignBucketsInOrder(params, outside, {}).status();
  EXPECT_THAT(s.message(), HasSubstr("parameter 3, outside [0, 3)"));
}

TEST(BucketAssignerTest, RejectsBadCapsAndSizes) {
  std::vector<BucketParam> params(2, BucketParam{4, kF32});
  absl::Status s = AssignBuckets(params, {0, 10}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("first_bucket_bytes=0"));
  s = AssignBuckets(params, {10, -1}).status();
  EXPECT_THAT(s.message(), HasSubstr("bucket_bytes=-1"));
  params[1].bytes = -4;
  s = AssignBuckets(params, {}).status();
  EXPECT_THAT(s.message(), HasSubstr("parameter 1 has -4 bytes"));
}

}  // namespace
}  // namespace paddle
