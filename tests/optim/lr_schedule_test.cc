// Learning-rate schedules: values at the endpoints and boundaries, negative steps, the warmup's
// composition with a decay schedule, the linear scaling rule, and argument errors.
#include "paddle/optim/lr_schedule.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace paddle::optim {
namespace {

void ExpectInvalid(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
}

TEST(LrScheduleTest, Constant) {
  auto c = ConstantLr::Create(0.3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->LrAt(0), 0.3);
  EXPECT_EQ((*c)->LrAt(1000000), 0.3);
  ExpectInvalid(ConstantLr::Create(-1).status(), "ConstantLr: lr must be finite and >= 0, got -1");
  ExpectInvalid(ConstantLr::Create(INFINITY).status(), "got inf");
}

TEST(LrScheduleTest, StepBoundaries) {
  auto s = StepLr::Create(0.8, 10, 0.5);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->LrAt(-5), 0.8);
  EXPECT_EQ((*s)->LrAt(0), 0.8);
  EXPECT_EQ((*s)->LrAt(9), 0.8);
  EXPECT_EQ((*s)->LrAt(10), 0.4);
  EXPECT_EQ((*s)->LrAt(19), 0.4);
  EXPECT_EQ((*s)->LrAt(20), 0.2);
  EXPECT_EQ((*s)->LrAt(35), 0.1);
  ExpectInvalid(StepLr::Create(0.1, 0, 0.5).status(), "step_size must be > 0, got 0");
  ExpectInvalid(StepLr::Create(0.1, -3, 0.5).status(), "got -3");
  ExpectInvalid(StepLr::Create(0.1, 10, 0.0).status(), "gamma must be finite and > 0, got 0");
  ExpectInvalid(StepLr::Create(-0.1, 10, 0.5).status(), "StepLr: base must be finite");
}

TEST(LrScheduleTest, CosineEndpoints) {
  auto c = CosineLr::Create(1.0, 100, 0.1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->LrAt(0), 1.0);
  EXPECT_EQ((*c)->LrAt(-1), 1.0);
  EXPECT_NEAR((*c)->LrAt(50), 0.55, 1e-15);  // halfway: the midpoint
  EXPECT_NEAR((*c)->LrAt(25), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_EQ((*c)->LrAt(100), 0.1);
  EXPECT_EQ((*c)->LrAt(1000), 0.1);
  double previous = 2.0;
  for (int64_t s = 0; s <= 100; ++s) {
    EXPECT_LT((*c)->LrAt(s), previous) << s;
    previous = (*c)->LrAt(s);
  }
  ExpectInvalid(CosineLr::Create(1.0, 0).status(), "total_steps must be > 0, got 0");
  ExpectInvalid(CosineLr::Create(1.0, 10, 2.0).status(), "min_lr 2 is above base 1");
  ExpectInvalid(CosineLr::Create(1.0, 10, -0.1).status(), "min_lr must be finite and >= 0");
}

TEST(LrScheduleTest, WarmupEndpoints) {
  auto w = WarmupLr::Create(*CosineLr::Create(1.0, 100), 10, 0.1);
  ASSERT_TRUE(w.ok());
  auto cosine = *CosineLr::Create(1.0, 100);
  EXPECT_NEAR((*w)->LrAt(0), 0.1, 1e-15);  // start_factor * after(0)
  EXPECT_NEAR((*w)->LrAt(5), cosine->LrAt(5) * (0.1 + 0.9 * 0.5), 1e-15);
  EXPECT_EQ((*w)->LrAt(10), cosine->LrAt(10));  // warmup over: the schedule, from the same step
  EXPECT_EQ((*w)->LrAt(60), cosine->LrAt(60));
  for (int64_t s = 0; s < 10; ++s) EXPECT_LT((*w)->LrAt(s), (*w)->LrAt(s + 1)) << s;
}

TEST(LrScheduleTest, WarmupOfZeroStepsIsTheSchedule) {
  auto w = WarmupLr::Create(*StepLr::Create(1.0, 5, 0.1), 0, 0.0);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->LrAt(0), 1.0);
  EXPECT_NEAR((*w)->LrAt(5), 0.1, 1e-16);
}

TEST(LrScheduleTest, WarmupErrors) {
  ExpectInvalid(WarmupLr::Create(nullptr, 5, 0.1).status(), "is null");
  ExpectInvalid(WarmupLr::Create(*ConstantLr::Create(1), -1, 0.1).status(),
                "warmup_steps must be >= 0, got -1");
  ExpectInvalid(WarmupLr::Create(*ConstantLr::Create(1), 5, 1.5).status(),
                "start_factor must be in [0, 1], got 1.5");
}

// Goyal et al.: 0.1 for batch 256, so 3.2 for batch 8192.
TEST(LrScheduleTest, LinearScalingRule) {
  EXPECT_NEAR(*ScaledLr(0.1, 256, 8192), 3.2, 1e-15);
  EXPECT_EQ(*ScaledLr(0.1, 256, 256), 0.1);
  EXPECT_NEAR(*ScaledLr(0.1, 256, 64), 0.025, 1e-17);
  ExpectInvalid(ScaledLr(0.1, 0, 256).status(), "got base_batch 0, global_batch 256");
  ExpectInvalid(ScaledLr(0.1, 256, -8).status(), "global_batch -8");
  ExpectInvalid(ScaledLr(-0.1, 256, 512).status(), "base_lr must be finite and >= 0");
}

}  // namespace
}  // namespace paddle::optim
