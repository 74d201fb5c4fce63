// cuBLAS and cuDNN handles, the stream the GPU ops run on, and the error macros for both libraries.
//
// Note [One stream per thread]
// Every op in paddle/ops/cuda enqueues its work on CurrentStream(), a per-thread value that starts
// as the legacy default stream (0) and that a caller (a test, a data-parallel worker) can change
// with SetCurrentStream. Handles are cached per (thread, device): a cuBLAS or cuDNN handle must not
// be used by two threads at once, and creating one costs milliseconds, so each thread creates its
// own on first use and keeps it. Before each use the handle is bound to the thread's current
// stream (cublasSetStream / cudnnSetStream are cheap). Handles are never destroyed: destroying
// them from thread-local destructors at process exit races with the CUDA runtime's own teardown
// (a known crash pattern), and a process has a bounded number of threads.
#ifndef PADDLE_OPS_CUDA_HANDLES_H_
#define PADDLE_OPS_CUDA_HANDLES_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/core/device.h"

namespace paddle {
namespace ops {
namespace cuda {

// The calling thread's stream (Note [One stream per thread]); 0 until set.
cudaStream_t CurrentStream();
void SetCurrentStream(cudaStream_t stream);

// Fails with kFailedPrecondition "no CUDA device/driver: ..." when CUDA is unusable, with
// kInvalidArgument when `device` is not a CUDA device that exists (naming the count), and
// otherwise makes it the calling thread's current device.
absl::Status UseDevice(const Device& device);

// The calling thread's handle for `device` (a CUDA ordinal), created on first use and bound to
// CurrentStream(). Calls UseDevice first.
absl::StatusOr<cublasHandle_t> CublasHandle(int device);
absl::StatusOr<cudnnHandle_t> CudnnHandle(int device);

// Status for a failed cuBLAS / cuDNN call `expr` at file:line, with the library's own text
// (cublasGetStatusString; cudnnGetErrorString plus cudnnGetLastErrorString). Codes:
// kResourceExhausted for allocation failures, kInvalidArgument for bad parameters,
// kFailedPrecondition for "not initialized"/"not supported"/architecture mismatch, else kInternal.
absl::Status CublasErrorToStatus(cublasStatus_t status, absl::string_view expr,
                                 absl::string_view file, int line);
absl::Status CudnnErrorToStatus(cudnnStatus_t status, absl::string_view expr,
                                absl::string_view file, int line);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

// Returns a Status from the enclosing function if `expr` (a cublasStatus_t) is not success.
#define PADDLE_CUBLAS_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                                        \
    const cublasStatus_t paddle_cublas_status_ = (expr);                                      \
    if (paddle_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                     \
      return ::paddle::ops::cuda::CublasErrorToStatus(paddle_cublas_status_, #expr, __FILE__, \
                                                      __LINE__);                              \
    }                                                                                         \
  } while (0)

// Returns a Status from the enclosing function if `expr` (a cudnnStatus_t) is not success.
#define PADDLE_CUDNN_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                      \
    const cudnnStatus_t paddle_cudnn_status_ = (expr);                                      \
    if (paddle_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                     \
      return ::paddle::ops::cuda::CudnnErrorToStatus(paddle_cudnn_status_, #expr, __FILE__, \
                                                     __LINE__);                             \
    }                                                                                       \
  } while (0)

#endif  // PADDLE_OPS_CUDA_HANDLES_H_
