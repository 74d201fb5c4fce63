// The host allocator, with a cache of large blocks.
//
// Note [Host block cache]: a training step allocates the same large buffers every step
// (activations, their gradients, conv workspaces: ~100 MiB for the CNN at batch 128). malloc
// hands blocks that large out as fresh mmaps and unmaps them on free, so every step pays a page
// fault per 4 KiB page; on the paravirtualized machines we run on a fault costs ~10 us, which
// made faults, not arithmetic, most of a CNN step. So blocks of kCachedMinBytes and more come
// from mmap with transparent huge pages requested (one fault per 2 MiB where the kernel allows
// it) and go back to a free list by size instead of to the kernel; the next request of that
// size reuses the block, already faulted in. The cache keeps at most kCacheCapBytes idle (more
// is unmapped at once), so memory a job no longer needs still returns to the system.
#include "paddle/core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

constexpr size_t kCachedMinBytes = size_t{256} << 10;
constexpr size_t kCacheGranule = size_t{64} << 10;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kCacheCapBytes = size_t{2} << 30;

class HostAllocator final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (Cached(bytes)) return AllocateLarge(RoundUp(bytes));
    void* ptr = nullptr;
    // posix_memalign(0) may return nullptr; one byte keeps pointers unique and non-null.
    if (posix_memalign(&ptr, kTensorAlignment, bytes == 0 ? 1 : bytes) != 0) {
      return Exhausted(bytes);
    }
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    if (!Cached(bytes)) {
      std::free(ptr);
      return;
    }
    size_t size = RoundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + size <= kCacheCapBytes) {
        free_.emplace(size, ptr);
        cached_bytes_ += size;
        return;
      }
    }
    munmap(ptr, size);
  }

  Device device() const override { return Device::Cpu(); }

 private:
  static bool Cached(size_t bytes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return false;  // keep every block visible to the sanitizer's own allocator
#else
    return bytes >= kCachedMinBytes;
#endif
  }

  static size_t RoundUp(size_t bytes) {
    size_t granule = bytes >= kHugePage ? kHugePage : kCacheGranule;
    return (bytes + granule - 1) / granule * granule;
  }

  static absl::Status Exhausted(size_t bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }

  absl::StatusOr<void*> AllocateLarge(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* ptr = it->second;
        free_.erase(it);
        cached_bytes_ -= size;
        return ptr;
      }
    }
    void* ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
      // Idle cached blocks of other sizes may be what stands in the way.
      ReleaseCache();
      ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (ptr == MAP_FAILED) return Exhausted(size);
    }
    if (size >= kHugePage) madvise(ptr, size, MADV_HUGEPAGE);  // advice; may be refused
    return ptr;
  }

  void ReleaseCache() {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      cached_bytes_ = 0;
    }
    for (auto& [size, ptr] : blocks) munmap(ptr, size);
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;  // guarded by mu_: idle blocks by size
  size_t cached_bytes_ = 0;            // guarded by mu_
};

}  // namespace

Allocator* CpuAllocator() {
  static HostAllocator* allocator = new HostAllocator();
  return allocator;
}

}  // namespace paddle
