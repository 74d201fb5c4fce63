// The CUDA caching allocator; see cuda_allocator.h for the rounding rules and
// Note [CUDA allocator streams] for when a freed block may be reused.
//
// Data structures (per device, under one mutex):
//  - a Segment is one cudaMalloc; it is cut into Blocks that form a doubly linked list in address
//    order (prev_/next_), so a freed block can merge with free neighbours in O(1);
//  - free blocks sit in one of two pools (small: segments of 2 MiB for requests up to 1 MiB;
//    large: everything else), each an ordered set by (size, address), so the best fit is
//    lower_bound(size): the size buckets of a classic free list, without a fixed bucket table;
//  - allocated blocks are found by address in a hash map.
#include "paddle/core/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

constexpr size_t kMinBlock = 512;                // granularity of small requests
constexpr size_t kSmallRequest = 1 << 20;        // requests up to this use the small pool
constexpr size_t kSmallSegment = 2 << 20;        // one cudaMalloc of the small pool
constexpr size_t kLargeGranularity = 2 << 20;    // large requests round to this
constexpr size_t kMaxRequest = size_t{1} << 62;  // beyond this rounding would overflow
constexpr int kMaxDevices = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool allocated = false;
  bool small = false;  // which pool it belongs to
  Block* prev = nullptr;
  Block* next = nullptr;
  // Events recorded on the legacy stream when this memory was freed (Note [CUDA allocator
  // streams]); more than one after free neighbours merged.
  std::vector<cudaEvent_t> pending;
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

class DeviceCachingAllocator final : public Allocator {
 public:
  explicit DeviceCachingAllocator(int device) : device_(device) {}

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::Cuda(device_); }

  CudaAllocatorStats Stats() {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  absl::Status EmptyCache() {
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
    if (!guard.ok()) return guard.status();
    absl::MutexLock lock(&mu_);
    return ReleaseCachedLocked();
  }

 private:
  using Pool = std::set<Block*, BySizeThenAddress>;

  Pool& PoolOf(const Block* b) { return b->small ? small_pool_ : large_pool_; }
  absl::Status WaitPendingLocked(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Block*> NewSegmentLocked(size_t size, bool small)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReleaseCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<cudaEvent_t> GetEventLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string OutOfMemoryMessage(size_t bytes, size_t rounded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  absl::Mutex mu_;
  Pool small_pool_ ABSL_GUARDED_BY(mu_);
  Pool large_pool_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<void*, Block*> allocated_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mu_);
  CudaAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<cudaEvent_t> DeviceCachingAllocator::GetEventLocked() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Makes sure no work queued before `b` was freed still runs (usually it finished long ago).
absl::Status DeviceCachingAllocator::WaitPendingLocked(Block* b) {
  while (!b->pending.empty()) {
    cudaEvent_t e = b->pending.back();
    PADDLE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));
    b->pending.pop_back();
    free_events_.push_back(e);
  }
  return absl::OkStatus();
}

absl::StatusOr<Block*> DeviceCachingAllocator::NewSegmentLocked(size_t size, bool small) {
  void* ptr = nullptr;
  cudaError_t error = cudaMalloc(&ptr, size);
  if (error == cudaErrorMemoryAllocation) {
    // Cached but unused segments may be what is missing: give them back and try once more.
    (void)cudaGetLastError();
    if (absl::Status s = ReleaseCachedLocked(); !s.ok()) return s;
    error = cudaMalloc(&ptr, size);
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaErrorToStatus(error, "cudaMalloc", __FILE__, __LINE__);
  }
  ++stats_.cuda_mallocs;
  stats_.reserved += size;
  Block* b = new Block;
  b->ptr = static_cast<char*>(ptr);
  b->size = size;
  b->small = small;
  return b;
}

absl::Status DeviceCachingAllocator::ReleaseCachedLocked() {
  absl::Status first_error;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {  // part of a segment still in use
        ++it;
        continue;
      }
      absl::Status s = WaitPendingLocked(b);
      if (s.ok()) {
        const cudaError_t error = cudaFree(b->ptr);
        if (error != cudaSuccess) {
          (void)cudaGetLastError();
          s = CudaErrorToStatus(error, "cudaFree(segment)", __FILE__, __LINE__);
        }
      }
      if (!s.ok()) {
        if (first_error.ok()) first_error = s;
        ++it;
        continue;
      }
      stats_.reserved -= b->size;
      it = pool->erase(it);
      delete b;
    }
  }
  return first_error;
}

std::string DeviceCachingAllocator::OutOfMemoryMessage(size_t bytes, size_t rounded) {
  size_t free_bytes = 0, total_bytes = 0;
  std::string device_memory;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    device_memory =
        absl::StrCat(", the device has ", free_bytes, " of ", total_bytes, " bytes free");
  } else {
    (void)cudaGetLastError();
  }
  return absl::StrCat("CUDA out of memory on cuda:", device_, ": allocating ", bytes,
                      " bytes (rounded to ", rounded, ") failed; this allocator has ",
                      stats_.allocated, " bytes in use and ", stats_.reserved - stats_.allocated,
                      " bytes cached (", stats_.reserved, " reserved)", device_memory,
                      "; free tensors you no longer need or use smaller batches");
}

absl::StatusOr<void*> DeviceCachingAllocator::Allocate(size_t bytes) {
  if (bytes > kMaxRequest) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA out of memory on cuda:", device_, ": allocating ", bytes, " bytes is impossible"));
  }
  const bool small = bytes <= kSmallRequest;
  const size_t rounded =
      small ? RoundUp(std::max<size_t>(bytes, 1), kMinBlock) : RoundUp(bytes, kLargeGranularity);
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (!guard.ok()) return guard.status();
  absl::MutexLock lock(&mu_);
  Pool& pool = small ? small_pool_ : large_pool_;
  Block probe;
  probe.size = rounded;
  Block* b = nullptr;
  auto it = pool.lower_bound(&probe);
  if (it != pool.end()) {
    b = *it;
    pool.erase(it);
    if (absl::Status s = WaitPendingLocked(b); !s.ok()) {
      pool.insert(b);
      return s;
    }
    ++stats_.cache_hits;
  } else {
    absl::StatusOr<Block*> fresh = NewSegmentLocked(small ? kSmallSegment : rounded, small);
    if (!fresh.ok()) {
      if (fresh.status().code() != absl::StatusCode::kResourceExhausted) return fresh.status();
      return absl::ResourceExhaustedError(
          absl::StrCat(OutOfMemoryMessage(bytes, rounded), " [", fresh.status().message(), "]"));
    }
    b = *fresh;
  }
  // Split off the tail when what is left is worth keeping: any small remainder (a multiple of
  // 512), a large one only from 1 MiB, so large blocks do not fragment into slivers.
  const size_t rest = b->size - rounded;
  if ((small && rest >= kMinBlock) || (!small && rest > kSmallRequest)) {
    Block* tail = new Block;
    tail->ptr = b->ptr + rounded;
    tail->size = rest;
    tail->small = b->small;
    tail->prev = b;
    tail->next = b->next;
    if (b->next != nullptr) b->next->prev = tail;
    b->next = tail;
    b->size = rounded;
    pool.insert(tail);
  }
  b->allocated = true;
  allocated_[b->ptr] = b;
  stats_.allocated += b->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return static_cast<void*>(b->ptr);
}

void DeviceCachingAllocator::Deallocate(void* ptr, size_t bytes) {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  absl::MutexLock lock(&mu_);
  auto found = allocated_.find(ptr);
  PADDLE_CHECK(found != allocated_.end())
      << "CUDA allocator of cuda:" << device_ << ": Deallocate(" << ptr << ", " << bytes
      << ") of a pointer it did not allocate (or freed twice)";
  Block* b = found->second;
  allocated_.erase(found);
  b->allocated = false;
  stats_.allocated -= b->size;
  // Note [CUDA allocator streams]: remember the legacy stream's queue as of now.
  absl::Status recorded = guard.status();
  if (recorded.ok()) {
    absl::StatusOr<cudaEvent_t> event = GetEventLocked();
    recorded = event.status();
    if (recorded.ok()) {
      const cudaError_t error = cudaEventRecord(*event, cudaStreamLegacy);
      if (error == cudaSuccess) {
        b->pending.push_back(*event);
      } else {
        (void)cudaGetLastError();
        free_events_.push_back(*event);
        recorded = CudaErrorToStatus(error, "cudaEventRecord", __FILE__, __LINE__);
      }
    }
  }
  if (!recorded.ok()) {
    // No event: wait for the whole device now instead, so reuse stays safe. This fails too only
    // when the context is gone (process exit or a sticky kernel error), and then nothing runs.
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    PADDLE_LOG(WARN, ALL) << "CUDA allocator of cuda:" << device_
                          << ": could not record the free of " << b->size
                          << " bytes on the default stream (" << recorded
                          << "); synchronized the device instead";
  }
  Pool& pool = PoolOf(b);
  // Merge with free neighbours of the same segment.
  for (Block* n : {b->prev, b->next}) {
    if (n == nullptr || n->allocated) continue;
    pool.erase(n);
    if (n == b->prev) {
      n->size += b->size;
      n->next = b->next;
      if (b->next != nullptr) b->next->prev = n;
      n->pending.insert(n->pending.end(), b->pending.begin(), b->pending.end());
      delete b;
      b = n;
    } else {
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      b->pending.insert(b->pending.end(), n->pending.begin(), n->pending.end());
      delete n;
    }
  }
  pool.insert(b);
}

struct Registry {
  absl::Mutex mu;
  std::unique_ptr<DeviceCachingAllocator> devices[kMaxDevices] ABSL_GUARDED_BY(mu);
};

// Never destroyed: tensors held by static objects may be freed during exit.
Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

DeviceCachingAllocator* Existing(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  return r.devices[device].get();
}

}  // namespace

absl::StatusOr<Allocator*> CudaAllocator(int device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count || device >= kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("CudaAllocator(", device,
                                                   "): no such CUDA device; ", *count,
                                                   " device(s) visible, ordinals 0..", *count - 1));
  }
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  if (r.devices[device] == nullptr) {
    r.devices[device] = std::make_unique<DeviceCachingAllocator>(device);
  }
  return r.devices[device].get();
}

CudaAllocatorStats GetCudaAllocatorStats(int device) {
  DeviceCachingAllocator* a = Existing(device);
  return a == nullptr ? CudaAllocatorStats{} : a->Stats();
}

absl::Status EmptyCudaCache(int device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  DeviceCachingAllocator* a = Existing(device);
  if (a == nullptr) return absl::OkStatus();
  return a->EmptyCache();
}

}  // namespace paddle
