// Tensor copies between host and CUDA devices, and the pinned host allocator; see cuda_copy.h.
//
// Note [Staged host copies]: host memory is copied through two pinned staging buffers of up to
// kStagingChunk bytes each, alternately: while the DMA engine moves chunk i out of (or into) one
// buffer, the host fills (or drains) the other. An event recorded after each chunk's copy says
// when its buffer may be touched again. If pinned memory cannot be had (a limit on locked memory),
// the copy falls back to cudaMemcpyAsync on the pageable memory, which CUDA stages itself.
#include "paddle/core/cuda/cuda_copy.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

constexpr size_t kStagingChunk = size_t{8} << 20;
constexpr size_t kPinnedGranularity = 4096;

// ---- Pinned host memory ----

// Blocks are rounded to 4 KiB and cached by size; a request takes the smallest cached block that
// fits when it is at most twice the size (so a 1 KiB request does not pin down a 64 MiB block).
class PinnedCachingAllocator final : public Allocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kPinnedGranularity - 1) /
                           kPinnedGranularity * kPinnedGranularity;
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.lower_bound(rounded);
      if (it != free_.end() && it->first <= 2 * rounded) {
        void* ptr = it->second;
        sizes_[ptr] = it->first;
        free_.erase(it);
        return ptr;
      }
    }
    void* ptr = nullptr;
    cudaError_t error = cudaHostAlloc(&ptr, rounded, cudaHostAllocPortable);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      ReleaseCached();
      error = cudaHostAlloc(&ptr, rounded, cudaHostAllocPortable);
    }
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      absl::Status s = CudaErrorToStatus(error, "cudaHostAlloc", __FILE__, __LINE__);
      return absl::Status(s.code(), absl::StrCat("pinned host allocation of ", bytes,
                                                 " bytes failed: ", s.message()));
    }
    absl::MutexLock lock(&mu_);
    sizes_[ptr] = rounded;
    return ptr;
  }

  void Deallocate(void* ptr, size_t bytes) override {
    absl::MutexLock lock(&mu_);
    auto it = sizes_.find(ptr);
    PADDLE_CHECK(it != sizes_.end()) << "pinned host allocator: Deallocate(" << ptr << ", " << bytes
                                     << ") of a pointer it did not allocate";
    free_.emplace(it->second, ptr);
    sizes_.erase(it);
  }

  Device device() const override { return Device::Cpu(); }

 private:
  void ReleaseCached() {
    absl::MutexLock lock(&mu_);
    for (auto& [size, ptr] : free_) {
      if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
    }
    free_.clear();
  }

  absl::Mutex mu_;
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mu_);
  std::map<void*, size_t> sizes_ ABSL_GUARDED_BY(mu_);  // handed out: rounded size
};

// A pinned block returned to its allocator at scope end.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) PinnedHostAllocator()->Deallocate(ptr_, bytes_);
  }
  bool Allocate(size_t bytes) {
    absl::StatusOr<void*> p = PinnedHostAllocator()->Allocate(bytes);
    if (!p.ok()) return false;
    ptr_ = static_cast<char*>(*p);
    bytes_ = bytes;
    return true;
  }
  char* get() const { return ptr_; }

 private:
  char* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- Byte copies ----

// Host -> device, Note [Staged host copies]. Returns with the copy complete.
absl::Status HostToDevice(char* dst, const char* src, size_t n, int device, cudaStream_t stream) {
  const size_t chunk = std::min(n, kStagingChunk);
  PinnedBuffer buf[2];
  if (!buf[0].Allocate(chunk) || !buf[1].Allocate(chunk)) {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
    PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }
  absl::StatusOr<CudaEvent> done[2] = {CudaEvent::Create(device, cudaEventDisableTiming),
                                       CudaEvent::Create(device, cudaEventDisableTiming)};
  for (const auto& e : done) {
    if (!e.ok()) return e.status();
  }
  for (size_t off = 0, i = 0; off < n; off += chunk, ++i) {
    const size_t len = std::min(chunk, n - off);
    const int k = static_cast<int>(i % 2);
    // The copy out of this buffer two chunks ago must be over before it is refilled.
    if (i >= 2) {
      if (absl::Status s = done[k]->Synchronize(); !s.ok()) return s;
    }
    std::memcpy(buf[k].get(), src + off, len);
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst + off, buf[k].get(), len, cudaMemcpyHostToDevice, stream));
    if (absl::Status s = done[k]->Record(stream); !s.ok()) return s;
  }
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

// Device -> host, Note [Staged host copies]. Returns with the copy complete.
absl::Status DeviceToHost(char* dst, const char* src, size_t n, int device, cudaStream_t stream) {
  const size_t chunk = std::min(n, kStagingChunk);
  PinnedBuffer buf[2];
  if (!buf[0].Allocate(chunk) || !buf[1].Allocate(chunk)) {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
    PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }
  absl::StatusOr<CudaEvent> done[2] = {CudaEvent::Create(device, cudaEventDisableTiming),
                                       CudaEvent::Create(device, cudaEventDisableTiming)};
  for (const auto& e : done) {
    if (!e.ok()) return e.status();
  }
  const size_t chunks = (n + chunk - 1) / chunk;
  auto issue = [&](size_t i) -> absl::Status {
    const size_t off = i * chunk;
    const int k = static_cast<int>(i % 2);
    PADDLE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf[k].get(), src + off, std::min(chunk, n - off),
                                                cudaMemcpyDeviceToHost, stream));
    return done[k]->Record(stream);
  };
  if (absl::Status s = issue(0); !s.ok()) return s;
  for (size_t i = 0; i < chunks; ++i) {
    // Chunk i+1 goes into the other buffer, drained in the previous iteration.
    if (i + 1 < chunks) {
      if (absl::Status s = issue(i + 1); !s.ok()) return s;
    }
    const int k = static_cast<int>(i % 2);
    if (absl::Status s = done[k]->Synchronize(); !s.ok()) return s;
    const size_t off = i * chunk;
    std::memcpy(dst + off, buf[k].get(), std::min(chunk, n - off));
  }
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

// Copies `n` bytes between two contiguous buffers, each on the CPU or a CUDA device, and waits
// for the copy.
absl::Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
                       cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return absl::OkStatus();
  }
  // The device whose stream it is: the destination unless that is the host.
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device);
  if (!guard.ok()) return guard.status();
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (src_device.is_cpu()) return HostToDevice(d, s, n, device, stream);
  if (dst_device.is_cpu()) return DeviceToHost(d, s, n, device, stream);
  if (src_device.index == dst_device.index) {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, stream));
  } else {
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyPeerAsync(d, dst_device.index, s, src_device.index, n, stream));
  }
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

// The error for a copy that needs CUDA when CUDA is unusable: names the tensor and the reason.
absl::Status CheckCudaUsable(const Tensor& t, Device to, const char* op) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(op, " of ", t.ToString(), " to ", to.ToString(),
                                                    ": ", count.status().message()));
}

// A contiguous host copy of a CUDA tensor that is not contiguous: the storage span its strides
// reach comes to the host, where Tensor::Clone gathers the elements.
absl::StatusOr<Tensor> GatherToHost(const Tensor& t, cudaStream_t stream) {
  int64_t span = 1;  // elements from data() to the last one reached, inclusive
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] == 0) span = 0;
    if (t.strides()[d] < 0) {
      return absl::UnimplementedError(absl::StrCat(
          "copy of ", t.ToString(), " with negative strides ", ShapeToString(t.strides())));
    }
  }
  if (span != 0) {
    for (int d = 0; d < t.dim(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  }
  absl::StatusOr<Tensor> raw = Tensor::Empty({span}, t.dtype());
  if (!raw.ok()) return raw.status();
  if (absl::Status s = CopyBytes(raw->data(), Device::Cpu(), t.data(), t.device(),
                                 static_cast<size_t>(span) * t.element_size(), stream);
      !s.ok()) {
    return s;
  }
  Tensor keep = *raw;  // the view below does not own its memory
  absl::StatusOr<Tensor> view = Tensor::FromBlob(
      raw->data(), t.shape(), t.dtype(), Device::Cpu(), [keep](void*) {}, t.strides());
  if (!view.ok()) return view.status();
  return view->Clone();
}

}  // namespace

Allocator* PinnedHostAllocator() {
  static PinnedCachingAllocator* allocator = new PinnedCachingAllocator;  // never destroyed
  return allocator;
}

absl::Status CopyTensor(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  if (!src.defined() || !dst.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyTensor with an undefined tensor: source ",
                                                   src.defined() ? src.ToString() : "undefined",
                                                   ", destination ",
                                                   dst.defined() ? dst.ToString() : "undefined"));
  }
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyTensor: source ", src.ToString(),
                                                   " does not match destination ", dst.ToString(),
                                                   " (shape and dtype must be equal)"));
  }
  if (src.device().is_cpu() && dst.device().is_cpu()) return dst.CopyFrom(src);
  if (absl::Status s = CheckCudaUsable(src, dst.device(), "CopyTensor"); !s.ok()) return s;
  if (src.numel() == 0) return absl::OkStatus();
  if (!dst.is_contiguous()) {
    if (dst.device().is_cuda()) {
      return absl::UnimplementedError(absl::StrCat("CopyTensor into ", dst.ToString(),
                                                   " with strides ", ShapeToString(dst.strides()),
                                                   ": a CUDA destination must be contiguous"));
    }
    absl::StatusOr<Tensor> host = ToDevice(src, Device::Cpu(), stream);
    if (!host.ok()) return host.status();
    return dst.CopyFrom(*host);
  }
  Tensor contiguous = src;
  if (!src.is_contiguous()) {
    // `stream` belongs to the destination's device; gather from another device on its default.
    const bool own_stream = dst.device().is_cpu() || dst.device() == src.device();
    absl::StatusOr<Tensor> c =
        src.device().is_cpu() ? src.Contiguous() : GatherToHost(src, own_stream ? stream : nullptr);
    if (!c.ok()) return c.status();
    contiguous = *std::move(c);
  }
  return CopyBytes(dst.data(), dst.device(), contiguous.data(), contiguous.device(), dst.nbytes(),
                   stream);
}

absl::StatusOr<Tensor> ToDevice(const Tensor& t, Device device, cudaStream_t stream) {
  if (!t.defined()) return absl::InvalidArgumentError("ToDevice of an undefined tensor");
  if (t.device().is_cpu() && device.is_cpu()) return t.Clone();
  if (absl::Status s = CheckCudaUsable(t, device, "ToDevice"); !s.ok()) return s;
  Allocator* allocator = CpuAllocator();
  if (device.is_cuda()) {
    absl::StatusOr<Allocator*> a = CudaAllocator(device.index);
    if (!a.ok()) {
      return absl::Status(a.status().code(),
                          absl::StrCat("ToDevice of ", t.ToString(), " to ", device.ToString(),
                                       ": ", a.status().message()));
    }
    allocator = *a;
  }
  absl::StatusOr<Tensor> out = Tensor::Empty(t.shape(), t.dtype(), allocator);
  if (!out.ok()) return out.status();
  if (absl::Status s = CopyTensor(t, *out, stream); !s.ok()) return s;
  return out;
}

}  // namespace paddle
