// The IPC reduction kernel; see ipc_reduce_kernel.h and Note [IPC reduction arithmetic].
//
// A grid-stride loop, one element per thread per iteration: the kernel is bound by reading n
// peers' memory, and simple indexing keeps it obviously correct. Loads of the n inputs of one
// element are independent, so they are in flight together.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "paddle/collective/intranode/cuda/ipc_reduce_kernel.h"
#include "paddle/core/cuda/cuda_status.h"

namespace paddle {
namespace {

struct Inputs {
  const void* ptr[kMaxIpcRanks];
};

// Accumulator type and conversions per element type.
template <typename T>
struct Acc {
  using Type = T;
  __device__ static Type Load(T v) { return v; }
  __device__ static T Store(Type v) { return v; }
};
template <>
struct Acc<__half> {
  using Type = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};
template <>
struct Acc<__nv_bfloat16> {
  using Type = float;
  __device__ static float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
};

template <typename A>
__device__ bool IsNan(A v) {
  return v != v;  // false for integers
}

// IEEE 754-2019 minimum/maximum: NaN wins (the first one), -0 < +0.
template <typename A>
__device__ A Min(A a, A b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  if (a == b) return signbit(static_cast<double>(a)) ? a : b;
  return a < b ? a : b;
}
template <typename A>
__device__ A Max(A a, A b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  if (a == b) return signbit(static_cast<double>(a)) ? b : a;
  return a > b ? a : b;
}

// Integer sums and products wrap: compute in the unsigned type of the same width.
template <typename A>
__device__ A Add(A a, A b) {
  return a + b;
}
template <typename A>
__device__ A Mul(A a, A b) {
  return a * b;
}
#define PADDLE_WRAPPING_(T, U)                                                    \
  template <>                                                                     \
  __device__ T Add<T>(T a, T b) {                                                 \
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));                 \
  }                                                                               \
  template <>                                                                     \
  __device__ T Mul<T>(T a, T b) {                                                 \
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); \
  }
PADDLE_WRAPPING_(int8_t, uint32_t)
PADDLE_WRAPPING_(uint8_t, uint32_t)
PADDLE_WRAPPING_(int32_t, uint32_t)
PADDLE_WRAPPING_(int64_t, uint64_t)
#undef PADDLE_WRAPPING_

template <typename T>
__global__ void IpcReduceKernel(T* out, Inputs in, int n, int64_t count, int op) {
  using A = typename Acc<T>::Type;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    A acc = Acc<T>::Load(static_cast<const T*>(in.ptr[0])[i]);
    for (int r = 1; r < n; ++r) {
      const A v = Acc<T>::Load(static_cast<const T*>(in.ptr[r])[i]);
      switch (op) {
        case static_cast<int>(ReduceOp::kSum):
        case static_cast<int>(ReduceOp::kAvg):
          acc = Add<A>(acc, v);
          break;
        case static_cast<int>(ReduceOp::kProd):
          acc = Mul<A>(acc, v);
          break;
        case static_cast<int>(ReduceOp::kMin):
          acc = Min<A>(acc, v);
          break;
        default:
          acc = Max<A>(acc, v);
          break;
      }
    }
    if (op == static_cast<int>(ReduceOp::kAvg)) acc = acc / static_cast<A>(n);
    out[i] = Acc<T>::Store(acc);
  }
}

template <typename T>
absl::Status Launch(void* out, const Inputs& in, int n, int64_t count, ReduceOp op,
                    cudaStream_t stream) {
  constexpr int kThreads = 512;
  // Enough blocks to fill an H100/H200 several times over; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 132 * 16);
  IpcReduceKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<T*>(out), in, n, count, static_cast<int>(op));
  PADDLE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

bool IpcReduceSupports(DType dtype, ReduceOp op) {
  if (!CheckReduction(dtype, op).ok()) return false;
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

absl::Status LaunchIpcReduce(void* out, const void* const* inputs, int n, int64_t count,
                             DType dtype, ReduceOp op, cudaStream_t stream) {
  if (n < 1 || n > kMaxIpcRanks || count < 0 || !IpcReduceSupports(dtype, op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("IPC reduce of ", count, " ", DTypeName(dtype), " elements with op ",
                     ReduceOpName(op), " over ", n, " buffers: need 1 to ", kMaxIpcRanks,
                     " buffers, count >= 0 and a dtype/op pair CheckReduction accepts"));
  }
  if (count == 0) return absl::OkStatus();
  Inputs in{};
  for (int r = 0; r < n; ++r) in.ptr[r] = inputs[r];
  switch (dtype) {
    case DType::kFloat32:
      return Launch<float>(out, in, n, count, op, stream);
    case DType::kFloat64:
      return Launch<double>(out, in, n, count, op, stream);
    case DType::kFloat16:
      return Launch<__half>(out, in, n, count, op, stream);
    case DType::kBFloat16:
      return Launch<__nv_bfloat16>(out, in, n, count, op, stream);
    case DType::kInt8:
      return Launch<int8_t>(out, in, n, count, op, stream);
    case DType::kUInt8:
      return Launch<uint8_t>(out, in, n, count, op, stream);
    case DType::kInt32:
      return Launch<int32_t>(out, in, n, count, op, stream);
    default:
      return Launch<int64_t>(out, in, n, count, op, stream);
  }
}

}  // namespace paddle
