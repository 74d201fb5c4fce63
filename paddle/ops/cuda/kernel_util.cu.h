// Device helpers shared by the .cu files of paddle/ops/cuda (included by nvcc only): storage
// loads and stores with fp32 math, the launch geometry, and launch-error checking.
#ifndef PADDLE_OPS_CUDA_KERNEL_UTIL_CU_H_
#define PADDLE_OPS_CUDA_KERNEL_UTIL_CU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/dtype.h"
#include "paddle/core/status.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace kernels {

__device__ __forceinline__ float LoadFloat(float v) { return v; }
__device__ __forceinline__ float LoadFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float LoadFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T StoreAs(float v);
template <>
__device__ __forceinline__ float StoreAs<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half StoreAs<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 StoreAs<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

constexpr int kBlockThreads = 256;
// Enough blocks to fill any current GPU many times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = 65536;

// Blocks for n elements at `per_thread` elements per thread step (n > 0).
inline unsigned GridFor(int64_t n, int64_t per_thread) {
  const int64_t threads = (n + per_thread - 1) / per_thread;
  return static_cast<unsigned>(
      std::min<int64_t>((threads + kBlockThreads - 1) / kBlockThreads, kMaxBlocks));
}

inline absl::Status CheckLaunchError() {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// The launch error (if any) of the kernel just launched, naming it and its size.
inline absl::Status CheckLaunch(const char* kernel, int64_t n) {
  return Annotate(CheckLaunchError(), absl::StrCat("launching ", kernel, " on ", n, " elements"));
}

inline absl::Status CheckStorageDType(const char* what, DType dtype) {
  if (dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": dtype ", DTypeName(dtype), " is not supported; use float32, float16 or bfloat16"));
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_KERNEL_UTIL_CU_H_
