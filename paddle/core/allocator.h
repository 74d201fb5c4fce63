// Allocators hand out the memory behind tensor storage. Every allocation is aligned to
// kTensorAlignment (64 bytes: one cache line, and enough for any AVX-512 load) so vectorized
// kernels and the transports never meet a misaligned buffer they allocated themselves.
// CpuAllocator() is the host allocator; the CUDA caching allocator implements the same interface
// in paddle/core/cuda.
#ifndef PADDLE_CORE_ALLOCATOR_H_
#define PADDLE_CORE_ALLOCATOR_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "paddle/core/device.h"

namespace paddle {

constexpr size_t kTensorAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` may be 0 (a valid, unique pointer is still returned). kResourceExhausted with the
  // size and device when memory is short.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// The host allocator (64-byte aligned), safe from any thread. Large blocks are cached for reuse
// (Note [Host block cache] in allocator.cc).
Allocator* CpuAllocator();

}  // namespace paddle

#endif  // PADDLE_CORE_ALLOCATOR_H_
