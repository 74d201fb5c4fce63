// RAII owners of CUDA streams and events, and a guard for the current device.
//
// Each object remembers its device and makes it current around every CUDA call it makes, so it
// can be used from any thread whatever that thread's current device is. Waiting on a stream can
// take a Deadline: a GPU that hangs (a kernel spinning forever, a collective whose peer died)
// then becomes a kDeadlineExceeded naming the stream and device rather than a hang.
#ifndef PADDLE_CORE_CUDA_CUDA_STREAM_H_
#define PADDLE_CORE_CUDA_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/deadline.h"

namespace paddle {

// Makes `device` current for its lifetime and restores the previous current device after.
class CudaDeviceGuard {
 public:
  // Errors: the device count's kFailedPrecondition without a GPU, kInvalidArgument for a device
  // outside [0, count), or the failing cudaGetDevice/cudaSetDevice.
  static absl::StatusOr<CudaDeviceGuard> Create(int device);

  CudaDeviceGuard(CudaDeviceGuard&& other) noexcept;
  CudaDeviceGuard& operator=(CudaDeviceGuard&&) = delete;
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  ~CudaDeviceGuard();

 private:
  explicit CudaDeviceGuard(int previous) : previous_(previous) {}
  int previous_;  // -1 once moved from: nothing to restore
};

class CudaStream {
 public:
  // A new stream on `device`. `non_blocking` streams do not synchronize with the legacy default
  // stream (see Note [CUDA allocator streams] in cuda_allocator.h for what that means when memory
  // is freed). `priority`: lower is higher priority; it must lie in the device's range
  // (cudaDeviceGetStreamPriorityRange, typically [-5, 0]), else kInvalidArgument naming the range.
  static absl::StatusOr<CudaStream> Create(int device, bool non_blocking = true, int priority = 0);

  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();  // waits for nothing: cudaStreamDestroy lets queued work finish

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

  // Blocks until all work queued on the stream is done; a failed kernel's error as a Status.
  absl::Status Synchronize() const;
  // Polls cudaStreamQuery until the stream is idle or `deadline` passes; then kDeadlineExceeded
  // "CUDA stream 0x... on cuda:N did not finish ... timed out after ...". The work keeps running.
  absl::Status Synchronize(const Deadline& deadline) const;

  // "stream 0x55d0c0 on cuda:0"
  std::string ToString() const;

 private:
  CudaStream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  void Reset();

  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

class CudaEvent {
 public:
  // `flags` as for cudaEventCreateWithFlags: cudaEventDefault records timing, and
  // cudaEventDisableTiming makes the event cheaper (ElapsedMs then fails).
  static absl::StatusOr<CudaEvent> Create(int device, unsigned int flags = cudaEventDefault);

  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

  // Captures the work queued on `stream` so far (nullptr: the legacy default stream).
  absl::Status Record(cudaStream_t stream);
  // Makes future work on `stream` wait for the recorded work, without blocking the host.
  absl::Status Wait(cudaStream_t stream) const;
  // True once the recorded work is done (also true for an event never recorded).
  absl::StatusOr<bool> Query() const;
  // Blocks the host until the recorded work is done.
  absl::Status Synchronize() const;
  // Milliseconds from `start` to this event; both recorded, done and created with timing.
  absl::StatusOr<float> ElapsedMs(const CudaEvent& start) const;

 private:
  CudaEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  void Reset();

  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

}  // namespace paddle

#endif  // PADDLE_CORE_CUDA_CUDA_STREAM_H_
