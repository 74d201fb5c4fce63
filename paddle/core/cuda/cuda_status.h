// CUDA runtime errors as absl::Status. Every CUDA runtime call in Paddle Collective goes through
// PADDLE_CUDA_RETURN_IF_ERROR, so an error names the call that failed, where it is, and CUDA's own
// error name and text, and carries a canonical code callers can act on (kFailedPrecondition for a
// missing driver or device, kResourceExhausted for out of memory, kInvalidArgument for bad
// arguments, kInternal otherwise).
//
// Only the runtime API (libcudart) is used: a binary linking the driver API (libcuda) does not even
// start on a machine without an NVIDIA driver, whereas this one starts and reports the problem.
#ifndef PADDLE_CORE_CUDA_CUDA_STATUS_H_
#define PADDLE_CORE_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

// The Status for `error` returned by the CUDA call whose source text is `expr`, at file:line:
// "CUDA call `cudaMalloc(&p, n)` failed at x.cc:12: cudaErrorMemoryAllocation (out of memory)".
absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view expr, absl::string_view file,
                               int line);

// Number of CUDA devices visible to this process. Without a usable driver or GPU this is a
// kFailedPrecondition error "no CUDA device/driver: <CUDA's error name and text>", which callers
// can show as the reason for taking a CPU path or skipping a test.
absl::StatusOr<int> CudaDeviceCount();

}  // namespace paddle

// Returns a Status from the enclosing function if `expr` (a cudaError_t) is not cudaSuccess.
// The runtime also keeps a non-sticky error as its "last error", where the next
// cudaGetLastError() after a kernel launch would report it again and blame the kernel; reading it
// here clears it, so each error is reported once.
#define PADDLE_CUDA_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                   \
    const cudaError_t paddle_cuda_error_ = (expr);                                       \
    if (paddle_cuda_error_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                                          \
      return ::paddle::CudaErrorToStatus(paddle_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

#endif  // PADDLE_CORE_CUDA_CUDA_STATUS_H_
