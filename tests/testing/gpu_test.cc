// NoGpuReason and friends: CudaDeviceCount() in the CUDA build, a fixed "built without CUDA"
// otherwise. Only this file looks at PADDLE_WITH_CUDA, so the header stays free of CUDA.
#include "tests/testing/gpu_test.h"

#include <string>

#include "absl/strings/str_cat.h"

#if PADDLE_WITH_CUDA
#include "absl/status/statusor.h"
#include "paddle/core/cuda/cuda_status.h"
#endif

namespace paddle {
namespace gpu_test {

std::string NoGpuReason() {
#if PADDLE_WITH_CUDA
  const absl::StatusOr<int> count = CudaDeviceCount();
  // CUDA's reason already reads "no CUDA device/driver: <error name> (<text>)<hint>".
  if (!count.ok()) return absl::StrCat(count.status().message(), "; ", kWhereGpuTestsRun);
  if (*count == 0) {
    return absl::StrCat("no CUDA device/driver: cudaGetDeviceCount() found 0 devices; ",
                        kWhereGpuTestsRun);
  }
  return "";
#else
  return absl::StrCat(
      "built without CUDA (--config=nocuda or no toolkit); it builds with CUDA by default wherever "
      "/usr/local/cuda holds the toolkit (as on CI) and ",
      kWhereGpuTestsRun);
#endif
}

std::string GpuPresentReason() {
  const int count = GpuDeviceCount();
  if (count == 0) return "";
  return absl::StrCat("a GPU is present (", count,
                      " CUDA device(s)); this checks the no-GPU path, which runs on machines "
                      "without one (CI)");
}

int GpuDeviceCount() {
#if PADDLE_WITH_CUDA
  const absl::StatusOr<int> count = CudaDeviceCount();
  return count.ok() ? *count : 0;
#else
  return 0;
#endif
}

void GpuTest::SetUp() {
  PADDLE_SKIP_WITHOUT_GPU();
  device_count_ = GpuDeviceCount();
}

}  // namespace gpu_test
}  // namespace paddle
