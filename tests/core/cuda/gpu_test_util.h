// The skip shared by the GPU tests of paddle/core/cuda: without a usable GPU each case skips,
// saying why and where it runs.
#ifndef TESTS_CORE_CUDA_GPU_TEST_UTIL_H_
#define TESTS_CORE_CUDA_GPU_TEST_UTIL_H_

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "paddle/core/cuda/cuda_status.h"

namespace paddle {
namespace cuda_test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<int> count = CudaDeviceCount();
    if (!count.ok()) {
      GTEST_SKIP() << count.status().message() << "; runs on the GPU machine via tools/gpu-bundle";
    }
    if (*count == 0) {
      GTEST_SKIP() << "no CUDA device/driver: cudaGetDeviceCount() found 0 devices; runs on the "
                      "GPU machine via tools/gpu-bundle";
    }
    device_count_ = *count;
  }

  int device_count_ = 0;
};

}  // namespace cuda_test
}  // namespace paddle

#endif  // TESTS_CORE_CUDA_GPU_TEST_UTIL_H_
