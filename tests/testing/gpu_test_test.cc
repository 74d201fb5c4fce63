// Tests of the GPU-test skip helper: the two reasons are consistent with the device count, each
// names the cause and where the test runs, the macros skip exactly when their reason is not empty
// (with the reason and any streamed context as the skip message), and the fixture skips or sees
// a device. On this machine kind (no GPU) the skip branches run; on the GPU machine the others.
#include "tests/testing/gpu_test.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace gpu_test {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The messages of the skips recorded so far in the running test, joined.
std::string SkipMessages() {
  const ::testing::TestResult* result =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  std::string all;
  for (int i = 0; i < result->total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result->GetTestPartResult(i);
    if (part.skipped()) all += part.message();
  }
  return all;
}

void SkipWithoutGpuWithContext() { PADDLE_SKIP_WITHOUT_GPU() << "; context from the test"; }

void SkipWithGpu() { PADDLE_SKIP_WITH_GPU(); }

// An `else` after the macro binds to the caller's `if`, not to the macro's own.
void ElseBindsToTheCallersIf(bool take_else, bool* took_else) {
  *took_else = false;
  if (!take_else)
    PADDLE_SKIP_WITH_GPU();
  else
    *took_else = true;
}

TEST(GpuTestHelper, ReasonsAgreeWithTheDeviceCount) {
  const int count = GpuDeviceCount();
  EXPECT_GE(count, 0);
  EXPECT_EQ(NoGpuReason().empty(), count > 0) << NoGpuReason();
  EXPECT_EQ(GpuPresentReason().empty(), count == 0) << GpuPresentReason();
  bool took_else = false;
  ElseBindsToTheCallersIf(true, &took_else);
  EXPECT_TRUE(took_else);
}

TEST(GpuTestHelper, NoGpuReasonNamesTheCauseAndWhereTheTestRuns) {
  const std::string reason = NoGpuReason();
  if (reason.empty()) {
    EXPECT_GT(GpuDeviceCount(), 0);
    return;
  }
  EXPECT_THAT(reason, EndsWith(std::string("runs on the GPU machine via tools/gpu-bundle")));
#if PADDLE_WITH_CUDA
  EXPECT_THAT(reason, StartsWith("no CUDA device/driver: "));
#else
  EXPECT_THAT(reason, StartsWith("built without CUDA (--config=nocuda or no toolkit); "));
  EXPECT_THAT(reason, HasSubstr("/usr/local/cuda"));
#endif
}

TEST(GpuTestHelper, GpuPresentReasonNamesTheDeviceCount) {
  const std::string reason = GpuPresentReason();
  if (reason.empty()) {
    EXPECT_EQ(GpuDeviceCount(), 0);
    return;
  }
  EXPECT_THAT(reason, StartsWith("a GPU is present (" + std::to_string(GpuDeviceCount()) +
                                 " CUDA device(s)); this checks the no-GPU path"));
}

// Reported as skipped here (no GPU) and as passed on the GPU machine; fails if the macro skipped
// when it should not have, or did not when it should, or lost the message.
TEST(GpuTestHelper, SkipWithoutGpuSkipsWithTheReasonAndTheContext) {
  const std::string reason = NoGpuReason();
  SkipWithoutGpuWithContext();
  EXPECT_EQ(IsSkipped(), !reason.empty());
  if (!reason.empty()) {
    EXPECT_EQ(SkipMessages(), reason + "; context from the test");
  }
}

TEST(GpuTestHelper, SkipWithGpuSkipsOnlyWithAGpu) {
  const std::string reason = GpuPresentReason();
  SkipWithGpu();
  EXPECT_EQ(IsSkipped(), !reason.empty());
  if (!reason.empty()) {
    EXPECT_EQ(SkipMessages(), reason);
  }
}

using GpuFixtureTest = GpuTest;

TEST_F(GpuFixtureTest, RunsOnlyWithADevice) {
  EXPECT_TRUE(NoGpuReason().empty());
  EXPECT_GE(device_count(), 1);
  EXPECT_EQ(device_count(), GpuDeviceCount());
}

}  // namespace
}  // namespace gpu_test
}  // namespace paddle
