// Copies of tensors between host memory and CUDA devices.
//
// Host memory is staged through page-locked (pinned) buffers from PinnedHostAllocator(), so the
// copies are real asynchronous DMA transfers overlapping the host-side memcpy of the next chunk.
// Every function here synchronizes `stream` before it returns: the result is ready to use by the
// host and by any stream. Non-contiguous sources are made contiguous first (a CUDA view that is not
// contiguous is gathered through the host, which is correct but slow; keep hot paths contiguous).
// Without a usable GPU, every copy involving a CUDA tensor fails with kFailedPrecondition naming
// the tensor and CUDA's reason ("no CUDA device/driver: ...").
#ifndef PADDLE_CORE_CUDA_CUDA_COPY_H_
#define PADDLE_CORE_CUDA_CUDA_COPY_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/allocator.h"
#include "paddle/core/device.h"
#include "paddle/core/tensor.h"

namespace paddle {

// A contiguous copy of `t` on `device` (CPU->CUDA, CUDA->CPU, CUDA->CUDA on one or two devices,
// CPU->CPU), allocated from CudaAllocator(device) or CpuAllocator(). `stream` (nullptr: the legacy
// default stream) must belong to the CUDA device involved (the destination's for CPU->CUDA and
// CUDA->CUDA, the source's for CUDA->CPU).
absl::StatusOr<Tensor> ToDevice(const Tensor& t, Device device, cudaStream_t stream = nullptr);

// Copies `src` into `dst` (same shape and dtype, any devices; errors name both tensors). `dst`
// must be contiguous if it is a CUDA tensor.
absl::Status CopyTensor(const Tensor& src, Tensor& dst, cudaStream_t stream);

// A caching allocator of page-locked host memory (cudaHostAlloc), process-wide. Its device() is
// the CPU. Allocate fails with CUDA's reason without a usable driver. A block must not be
// deallocated while an asynchronous copy still uses it (synchronize first).
Allocator* PinnedHostAllocator();

}  // namespace paddle

#endif  // PADDLE_CORE_CUDA_CUDA_COPY_H_
