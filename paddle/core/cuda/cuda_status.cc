// Mapping of CUDA runtime errors to canonical Status codes and messages; see cuda_status.h.
#include "paddle/core/cuda/cuda_status.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

// Errors that mean "this machine or process cannot use CUDA", as opposed to a bug in the call.
bool IsUnusableCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

absl::StatusCode CodeFor(cudaError_t error) {
  if (IsUnusableCudaError(error)) return absl::StatusCode::kFailedPrecondition;
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "cudaErrorNoDevice (no CUDA-capable device is detected)"
std::string Describe(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

// What to change when CUDA is unusable; names CUDA_VISIBLE_DEVICES when it is set, since an
// empty or wrong value there is a common cause.
std::string UnusableHint() {
  std::string hint =
      "; check that an NVIDIA driver is loaded and a GPU is visible (nvidia-smi), or build with "
      "--config=nocuda";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    absl::StrAppend(&hint, " [CUDA_VISIBLE_DEVICES=\"", visible, "\"]");
  }
  return hint;
}

}  // namespace

absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view expr, absl::string_view file,
                               int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(
      CodeFor(error),
      absl::StrCat("CUDA call `", expr, "` failed at ", file, ":", line, ": ", Describe(error),
                   IsUnusableCudaError(error) ? UnusableHint() : ""));
}

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess) return count;
  (void)cudaGetLastError();
  // Whatever the error, no device can be used; say so in the terms the caller asked about.
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA device/driver: ", Describe(error), UnusableHint()));
}

}  // namespace paddle
