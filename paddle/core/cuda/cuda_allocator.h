// The CUDA caching device allocator: one process-wide instance per device, implementing
// paddle::Allocator so `Tensor::Empty(shape, dtype, *CudaAllocator(0))` gives a tensor in GPU
// memory.
//
// cudaMalloc and cudaFree are slow (cudaFree synchronizes the device), so freed blocks stay cached
// and are handed out again. Requests are rounded: up to 1 MiB to a multiple of 512 bytes, carved
// out of 2 MiB segments; larger ones to a multiple of 2 MiB, each a segment of its own. A free
// block larger than a request is split and the rest stays cached; neighbours in one segment merge
// again when both are free. Memory comes from plain cudaMalloc (never managed memory). When
// cudaMalloc runs out, the allocator returns its unused segments to CUDA and tries once more, then
// fails with kResourceExhausted naming the bytes asked for, the bytes in use and cached, and the
// device. Every function is thread-safe.
//
// Note [CUDA allocator streams]: every block belongs to the legacy default stream
// (cudaStreamLegacy). Deallocate records an event on that stream, and a cached block is handed out
// again only once that event has completed (the allocator waits for it on the host if it must).
// So work on the legacy default stream or on any blocking stream (which the legacy stream
// synchronizes with) may still be queued on a block when its last tensor goes away. The rule for
// everything else: work on a NON-blocking stream (CudaStream's default) that uses a block must be
// finished before the block is freed, or made part of the legacy stream, i.e. record a CudaEvent on
// that stream and `cudaStreamWaitEvent(cudaStreamLegacy, event)` before dropping the tensor; a
// CudaStream::Synchronize() before dropping it is the simplest way. The allocator never frees
// memory that a pending copy or kernel could still touch, provided this rule is kept.
#ifndef PADDLE_CORE_CUDA_CUDA_ALLOCATOR_H_
#define PADDLE_CORE_CUDA_CUDA_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/allocator.h"

namespace paddle {

// The caching allocator of CUDA device `device` (created on first use, never destroyed). Without
// a usable GPU, the kFailedPrecondition of CudaDeviceCount() ("no CUDA device/driver: ...");
// kInvalidArgument for a device outside [0, count). Allocate returns pointers aligned to at least
// 256 bytes; Allocate(0) returns a unique pointer too.
absl::StatusOr<Allocator*> CudaAllocator(int device);

struct CudaAllocatorStats {
  size_t allocated = 0;       // bytes in blocks handed out now (rounded sizes)
  size_t reserved = 0;        // bytes held from cudaMalloc: allocated + cached
  size_t peak_allocated = 0;  // the most `allocated` has been
  int64_t cuda_mallocs = 0;   // cudaMalloc calls that succeeded
  int64_t cache_hits = 0;     // allocations served from cached memory, without cudaMalloc
};

// Counters of `device`'s allocator; all zero if it was never created (or the device is invalid).
CudaAllocatorStats GetCudaAllocatorStats(int device);

// Returns every cached segment of `device` that holds no allocated block to CUDA (cudaFree).
// OK and nothing to do if the allocator was never created; the CudaAllocator(device) error if the
// device cannot be used.
absl::Status EmptyCudaCache(int device);

}  // namespace paddle

#endif  // PADDLE_CORE_CUDA_CUDA_ALLOCATOR_H_
