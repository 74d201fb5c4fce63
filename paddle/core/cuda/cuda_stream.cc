// CUDA streams, events and the device guard; see cuda_stream.h.
#include "paddle/core/cuda/cuda_stream.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/core/cuda/cuda_status.h"

namespace paddle {
namespace {

absl::Status CheckDevice(int device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device,
                                                   " does not exist: ", *count,
                                                   " device(s) visible, ordinals 0..", *count - 1));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- CudaDeviceGuard ----

absl::StatusOr<CudaDeviceGuard> CudaDeviceGuard::Create(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  int previous = 0;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous));
  if (previous != device) PADDLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return CudaDeviceGuard(previous);
}

CudaDeviceGuard::CudaDeviceGuard(CudaDeviceGuard&& other) noexcept : previous_(other.previous_) {
  other.previous_ = -1;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ < 0) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != previous_) {
    // Nothing to report from a destructor; a failure here leaves the device the guard set.
    if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
}

// ---- CudaStream ----

absl::StatusOr<CudaStream> CudaStream::Create(int device, bool non_blocking, int priority) {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device);
  if (!guard.ok()) return guard.status();
  int least = 0, greatest = 0;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  // Numerically, `greatest` (highest priority) is the smaller one.
  if (priority < greatest || priority > least) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA stream priority ", priority,
                                                   " is outside cuda:", device, "'s range [",
                                                   greatest, ", ", least, "] (lower is higher)"));
  }
  cudaStream_t stream = nullptr;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(
      &stream, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
  return CudaStream(stream, device);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(other.stream_), device_(other.device_) {
  other.stream_ = nullptr;
  other.device_ = -1;
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    std::swap(stream_, other.stream_);
    std::swap(device_, other.device_);
  }
  return *this;
}

CudaStream::~CudaStream() { Reset(); }

void CudaStream::Reset() {
  if (stream_ == nullptr) return;
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (guard.ok() && cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
  stream_ = nullptr;
  device_ = -1;
}

std::string CudaStream::ToString() const {
  return absl::StrFormat("stream %p on cuda:%d", static_cast<void*>(stream_), device_);
}

absl::Status CudaStream::Synchronize() const {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (!guard.ok()) return guard.status();
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaStream::Synchronize(const Deadline& deadline) const {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (!guard.ok()) return guard.status();
  // Poll with a back-off from 10 us to 1 ms: short kernels are seen at once, long waits cost
  // little CPU.
  absl::Duration pause = absl::Microseconds(10);
  while (true) {
    const cudaError_t error = cudaStreamQuery(stream_);
    if (error == cudaSuccess) return absl::OkStatus();
    if (error != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return CudaErrorToStatus(error, "cudaStreamQuery(stream)", __FILE__, __LINE__);
    }
    if (deadline.Expired()) {
      return deadline.TimeoutError(
          absl::StrCat("waiting for CUDA ", ToString(),
                       " (its work is still running; a kernel may be stuck or a peer of a "
                       "collective gone)"));
    }
    absl::SleepFor(std::min(pause, deadline.Remaining()));
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

// ---- CudaEvent ----

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, unsigned int flags) {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device);
  if (!guard.ok()) return guard.status();
  cudaEvent_t event = nullptr;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return CudaEvent(event, device);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(other.event_), device_(other.device_) {
  other.event_ = nullptr;
  other.device_ = -1;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    std::swap(event_, other.event_);
    std::swap(device_, other.device_);
  }
  return *this;
}

CudaEvent::~CudaEvent() { Reset(); }

void CudaEvent::Reset() {
  if (event_ == nullptr) return;
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (guard.ok() && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
  event_ = nullptr;
  device_ = -1;
}

absl::Status CudaEvent::Record(cudaStream_t stream) {
  absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device_);
  if (!guard.ok()) return guard.status();
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream));
  return absl::OkStatus();
}

absl::Status CudaEvent::Wait(cudaStream_t stream) const {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, event_, 0));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEvent::Query() const {
  const cudaError_t error = cudaEventQuery(event_);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) return false;
  (void)cudaGetLastError();
  return CudaErrorToStatus(error, "cudaEventQuery(event)", __FILE__, __LINE__);
}

absl::Status CudaEvent::Synchronize() const {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return absl::OkStatus();
}

absl::StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent& start) const {
  float ms = 0;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace paddle
