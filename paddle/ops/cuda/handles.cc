// Per-thread handle caches and the cuBLAS/cuDNN error mapping; see handles.h.
#include "paddle/ops/cuda/handles.h"

#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

thread_local cudaStream_t current_stream = nullptr;

// Note [One stream per thread] in handles.h: created on first use, never destroyed.
thread_local std::unordered_map<int, cublasHandle_t>* cublas_handles = nullptr;
thread_local std::unordered_map<int, cudnnHandle_t>* cudnn_handles = nullptr;

absl::StatusCode CublasCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CudnnCode(cudnnStatus_t status) {
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return absl::StatusCode::kResourceExhausted;
  }
  switch (CUDNN_STATUS_CATEGORY(static_cast<int>(status))) {
    case CUDNN_STATUS_BAD_PARAM:
      return absl::StatusCode::kInvalidArgument;
    case CUDNN_STATUS_NOT_SUPPORTED:
    case CUDNN_STATUS_NOT_INITIALIZED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

cudaStream_t CurrentStream() { return current_stream; }
void SetCurrentStream(cudaStream_t stream) { current_stream = stream; }

absl::Status UseDevice(const Device& device) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (!device.is_cuda() || device.index < 0 || device.index >= *count) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device.ToString(),
                                                   " is not a CUDA device of this process, which "
                                                   "sees ",
                                                   *count, " (check CUDA_VISIBLE_DEVICES)"));
  }
  PADDLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.index));
  return absl::OkStatus();
}

absl::StatusOr<cublasHandle_t> CublasHandle(int device) {
  absl::Status s = UseDevice(Device::Cuda(device));
  if (!s.ok()) return s;
  if (cublas_handles == nullptr) cublas_handles = new std::unordered_map<int, cublasHandle_t>();
  auto it = cublas_handles->find(device);
  if (it == cublas_handles->end()) {
    cublasHandle_t handle = nullptr;
    PADDLE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
    it = cublas_handles->emplace(device, handle).first;
  }
  PADDLE_CUBLAS_RETURN_IF_ERROR(cublasSetStream(it->second, current_stream));
  return it->second;
}

absl::StatusOr<cudnnHandle_t> CudnnHandle(int device) {
  absl::Status s = UseDevice(Device::Cuda(device));
  if (!s.ok()) return s;
  if (cudnn_handles == nullptr) cudnn_handles = new std::unordered_map<int, cudnnHandle_t>();
  auto it = cudnn_handles->find(device);
  if (it == cudnn_handles->end()) {
    cudnnHandle_t handle = nullptr;
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
    it = cudnn_handles->emplace(device, handle).first;
  }
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetStream(it->second, current_stream));
  return it->second;
}

absl::Status CublasErrorToStatus(cublasStatus_t status, absl::string_view expr,
                                 absl::string_view file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(
      CublasCode(status),
      absl::StrCat("cuBLAS call `", expr, "` failed at ", file, ":", line, ": ",
                   cublasGetStatusString(status), " (", static_cast<int>(status), ")"));
}

absl::Status CudnnErrorToStatus(cudnnStatus_t status, absl::string_view expr,
                                absl::string_view file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string message =
      absl::StrCat("cuDNN call `", expr, "` failed at ", file, ":", line, ": ",
                   cudnnGetErrorString(status), " (", static_cast<int>(status), ")");
  if (last[0] != '\0') absl::StrAppend(&message, "; cuDNN says: ", last);
  return absl::Status(CudnnCode(status), message);
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
