// A test-only kernel that keeps a stream busy for a given time, so tests can observe work that is
// still running: timeouts of CudaStream::Synchronize, event timing, and the allocator waiting
// for pending work before it reuses a block.
#ifndef TESTS_CORE_CUDA_SPIN_KERNEL_H_
#define TESTS_CORE_CUDA_SPIN_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace paddle {
namespace cuda_test {

// Launches one thread that spins on the GPU's global nanosecond timer for `ns` nanoseconds, then
// writes 1 to `*done` (device memory; may be null). Returns the launch error.
cudaError_t LaunchSpin(int64_t ns, int* done, cudaStream_t stream);

}  // namespace cuda_test
}  // namespace paddle

#endif  // TESTS_CORE_CUDA_SPIN_KERNEL_H_
