// Tests of CudaStream, CudaEvent and CudaDeviceGuard: creation errors, synchronization (and its
// timeout while a kernel spins), events ordering one stream after another, and timing.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/deadline.h"
#include "tests/core/cuda/spin_kernel.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

using ::testing::HasSubstr;

constexpr int64_t kMs = 1000 * 1000;  // nanoseconds

using CudaStreamTest = gpu_test::GpuTest;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_F(CudaStreamTest, CreateSynchronizeAndMove) {
  absl::StatusOr<CudaStream> s = CudaStream::Create(0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->get(), nullptr);
  EXPECT_EQ(s->device(), 0);
  EXPECT_THAT(s->ToString(), HasSubstr("on cuda:0"));
  ASSERT_EQ(cuda_test::LaunchSpin(5 * kMs, nullptr, s->get()), cudaSuccess);
  EXPECT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(cudaStreamQuery(s->get()), cudaSuccess);
  CudaStream moved = *std::move(s);
  EXPECT_NE(moved.get(), nullptr);
  EXPECT_TRUE(moved.Synchronize(Deadline::After(absl::Seconds(5))).ok());
  absl::StatusOr<CudaStream> blocking = CudaStream::Create(0, /*non_blocking=*/false);
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  unsigned int flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(blocking->get(), &flags), cudaSuccess);
  EXPECT_EQ(flags, cudaStreamDefault);
  ASSERT_EQ(cudaStreamGetFlags(moved.get(), &flags), cudaSuccess);
  EXPECT_EQ(flags, cudaStreamNonBlocking);
}

TEST_F(CudaStreamTest, PriorityOutsideRangeAndBadDeviceAreArgumentErrors) {
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  absl::StatusOr<CudaStream> high = CudaStream::Create(0, true, greatest);
  ASSERT_TRUE(high.ok()) << high.status();
  int priority = 0;
  ASSERT_EQ(cudaStreamGetPriority(high->get(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  const absl::Status bad = CudaStream::Create(0, true, least + 1).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad), HasSubstr("priority"));
  EXPECT_THAT(Message(bad), HasSubstr(std::to_string(greatest)));
  const absl::Status no_device = CudaStream::Create(device_count()).status();
  EXPECT_EQ(no_device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(no_device), HasSubstr("does not exist"));
  EXPECT_EQ(CudaEvent::Create(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaStreamTest, SynchronizeTimesOutWhileAKernelSpins) {
  absl::StatusOr<CudaStream> s = CudaStream::Create(0);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(cuda_test::LaunchSpin(1500 * kMs, nullptr, s->get()), cudaSuccess);
  const absl::Time start = absl::Now();
  const absl::Status timeout = s->Synchronize(Deadline::After(absl::Milliseconds(100)));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(timeout.code(), absl::StatusCode::kDeadlineExceeded) << timeout;
  EXPECT_THAT(Message(timeout), HasSubstr(s->ToString()));
  EXPECT_THAT(Message(timeout), HasSubstr("timed out after"));
  EXPECT_GE(waited, absl::Milliseconds(100));
  EXPECT_LT(waited, absl::Milliseconds(1000));
  // The work was not cancelled: a wait without limit sees it finish.
  EXPECT_TRUE(s->Synchronize().ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1000));
}

TEST_F(CudaStreamTest, EventOrdersOneStreamAfterAnother) {
  absl::StatusOr<CudaStream> a = CudaStream::Create(0);
  absl::StatusOr<CudaStream> b = CudaStream::Create(0);
  absl::StatusOr<CudaEvent> e = CudaEvent::Create(0, cudaEventDisableTiming);
  ASSERT_TRUE(a.ok() && b.ok() && e.ok());
  absl::StatusOr<bool> fresh = e->Query();
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(*fresh);  // never recorded counts as done
  ASSERT_EQ(cuda_test::LaunchSpin(200 * kMs, nullptr, a->get()), cudaSuccess);
  ASSERT_TRUE(e->Record(a->get()).ok());
  ASSERT_TRUE(e->Wait(b->get()).ok());
  ASSERT_EQ(cuda_test::LaunchSpin(1 * kMs, nullptr, b->get()), cudaSuccess);
  absl::StatusOr<bool> early = e->Query();
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(*early);  // 200 ms of spinning is not over yet
  ASSERT_TRUE(b->Synchronize().ok());
  // b's work waited for the event, so a's spin is done too.
  absl::StatusOr<bool> late = e->Query();
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(*late);
  EXPECT_EQ(cudaStreamQuery(a->get()), cudaSuccess);
  // Timing was disabled for this event.
  EXPECT_FALSE(e->ElapsedMs(*e).ok());
}

TEST_F(CudaStreamTest, ElapsedTimeOfASpin) {
  absl::StatusOr<CudaStream> s = CudaStream::Create(0);
  absl::StatusOr<CudaEvent> start = CudaEvent::Create(0);
  absl::StatusOr<CudaEvent> stop = CudaEvent::Create(0);
  ASSERT_TRUE(s.ok() && start.ok() && stop.ok());
  ASSERT_TRUE(start->Record(s->get()).ok());
  ASSERT_EQ(cuda_test::LaunchSpin(50 * kMs, nullptr, s->get()), cudaSuccess);
  ASSERT_TRUE(stop->Record(s->get()).ok());
  ASSERT_TRUE(stop->Synchronize().ok());
  absl::StatusOr<float> ms = stop->ElapsedMs(*start);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 49.0f);
  EXPECT_LT(*ms, 1000.0f);
}

TEST_F(CudaStreamTest, DeviceGuardRestoresTheDevice) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int last = device_count() - 1;
  {
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(last);
    ASSERT_TRUE(guard.ok()) << guard.status();
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, last);
    CudaDeviceGuard moved = *std::move(guard);  // the moved-from guard restores nothing
  }
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  const absl::Status bad = CudaDeviceGuard::Create(device_count()).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad), HasSubstr(std::to_string(device_count()) + " device(s) visible"));
}

#else  // !PADDLE_WITH_CUDA

TEST(CudaStreamTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU() << "; paddle/core/cuda is empty"; }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
