// The one "is there a usable GPU, and if not, skip saying why and where the test runs" of the GPU
// tests. Every test that needs a CUDA device skips through here, so each skip names CUDA's own
// reason (or "built without CUDA") and where the test does run: the CUDA build on the GPU machine
// via tools/gpu-bundle. Tests of the no-GPU path skip the other way round, on a machine with a GPU.
//
// The header names no CUDA symbol, so it builds in both configurations; in the CPU-only build
// (`--config=nocuda`) there is never a GPU and NoGpuReason() says the build has no CUDA.
//
//   TEST(NcclGpuTest, Allreduce) {
//     PADDLE_SKIP_WITHOUT_GPU();
//     ...
//   }
//   using CudaStreamTest = gpu_test::GpuTest;  // SetUp skips; device_count() is at least 1
#ifndef TESTS_TESTING_GPU_TEST_H_
#define TESTS_TESTING_GPU_TEST_H_

#include <string>

#include "gtest/gtest.h"

namespace paddle {
namespace gpu_test {

// Where the GPU tests run; the tail of every NoGpuReason().
inline constexpr char kWhereGpuTestsRun[] = "runs on the GPU machine via tools/gpu-bundle";

// Empty when a CUDA device can be used. Otherwise why not, ending with where the test runs:
// "no CUDA device/driver: cudaErrorNoDevice (...); runs on the GPU machine via tools/gpu-bundle",
// or "built without CUDA (--config=nocuda or no toolkit); it builds with CUDA by default ... and
// runs on the GPU machine via tools/gpu-bundle" in the CPU-only build.
std::string NoGpuReason();

// The opposite test, for cases that check the no-GPU path: empty when there is no usable CUDA
// device (or no CUDA at all), otherwise "a GPU is present (N CUDA device(s)); this checks the
// no-GPU path, which runs on machines without one (CI)".
std::string GpuPresentReason();

// Number of usable CUDA devices: 0 when there is none or the build has no CUDA.
int GpuDeviceCount();

// A fixture whose SetUp skips with NoGpuReason() when there is no usable GPU. A fixture that
// overrides SetUp calls GpuTest::SetUp() first and returns if IsSkipped().
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // At least 1 once SetUp did not skip.
  int device_count() const { return device_count_; }

 private:
  int device_count_ = 0;
};

}  // namespace gpu_test
}  // namespace paddle

// Skips the current test with NoGpuReason() when no CUDA device can be used. More context can be
// streamed after it: `PADDLE_SKIP_WITHOUT_GPU() << "; paddle/core/cuda is empty";`. The switch
// keeps an `else` after the macro from binding to its `if` (as gtest's own macros do).
#define PADDLE_SKIP_WITHOUT_GPU() \
  PADDLE_GPU_TEST_SKIP_IF_NOT_EMPTY_(::paddle::gpu_test::NoGpuReason())

// Skips the current test with GpuPresentReason() when a CUDA device is present: for the tests of
// what a machine without a GPU gets.
#define PADDLE_SKIP_WITH_GPU() \
  PADDLE_GPU_TEST_SKIP_IF_NOT_EMPTY_(::paddle::gpu_test::GpuPresentReason())

#define PADDLE_GPU_TEST_SKIP_IF_NOT_EMPTY_(reason_expr)                                       \
  switch (0)                                                                                  \
  case 0:                                                                                     \
  default:                                                                                    \
    if (const std::string paddle_skip_reason_ = (reason_expr); paddle_skip_reason_.empty()) { \
    } else                                                                                    \
      GTEST_SKIP() << paddle_skip_reason_

#endif  // TESTS_TESTING_GPU_TEST_H_
