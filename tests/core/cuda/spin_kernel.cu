// The spinning test kernel; see spin_kernel.h.
#include "tests/core/cuda/spin_kernel.h"

namespace paddle {
namespace cuda_test {
namespace {

__device__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(int64_t ns, int* done) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < static_cast<uint64_t>(ns)) {
  }
  if (done != nullptr) *done = 1;
}

}  // namespace

cudaError_t LaunchSpin(int64_t ns, int* done, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(ns, done);
  return cudaGetLastError();
}

}  // namespace cuda_test
}  // namespace paddle
