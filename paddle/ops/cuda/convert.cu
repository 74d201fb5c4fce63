// Conversion kernels: one grid-stride loop, instantiated with a per-element conversion. Finite
// values and infinities go through the hardware conversions (cvt.rn.*, which round to nearest even
// and keep subnormals since we do not compile with -ftz); NaNs are rebuilt with integer operations,
// because the hardware's NaN payload handling is not specified to match our CPU semantics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/convert.h"

namespace paddle {
namespace {

// Note [Conversion semantics] in paddle/core/half.h: quiet, sign kept, top payload bits kept.
__device__ __forceinline__ bool IsFloatNaN(uint32_t x) { return (x & 0x7fffffffu) > 0x7f800000u; }

struct HalfToFloatOp {
  __device__ __forceinline__ float operator()(uint16_t h) const {
    if ((h & 0x7fffu) > 0x7c00u) {
      return __uint_as_float(((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x03ffu) << 13));
    }
    return __half2float(__ushort_as_half(h));
  }
};

struct FloatToHalfOp {
  __device__ __forceinline__ uint16_t operator()(float f) const {
    const uint32_t x = __float_as_uint(f);
    if (IsFloatNaN(x)) return ((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x03ffu);
    return __half_as_ushort(__float2half_rn(f));
  }
};

struct BFloat16ToFloatOp {
  __device__ __forceinline__ float operator()(uint16_t b) const {
    const uint32_t x = static_cast<uint32_t>(b) << 16;
    return __uint_as_float(IsFloatNaN(x) ? x | 0x00400000u : x);
  }
};

struct FloatToBFloat16Op {
  __device__ __forceinline__ uint16_t operator()(float f) const {
    const uint32_t x = __float_as_uint(f);
    if (IsFloatNaN(x)) return (x >> 16) | 0x0040u;
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

template <typename Op, typename In, typename Out>
__global__ void ConvertKernel(const In* __restrict__ in, Out* __restrict__ out, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = Op()(in[i]);
  }
}

absl::Status LastLaunchError() {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename Op, typename In, typename Out>
absl::Status Launch(const char* kernel, const In* in, Out* out, size_t n, cudaStream_t stream) {
  // An empty grid is a launch error, and there is nothing to do.
  if (n == 0) return absl::OkStatus();
  constexpr size_t kThreads = 256;
  // Enough blocks to fill any current GPU many times over; the grid-stride loop covers the rest.
  constexpr size_t kMaxBlocks = 65536;
  const size_t blocks = std::min((n + kThreads - 1) / kThreads, kMaxBlocks);
  ConvertKernel<Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, n);
  return Annotate(LastLaunchError(), absl::StrCat("launching ", kernel, " on ", n, " elements"));
}

}  // namespace

absl::Status CudaHalfToFloat(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  return Launch<HalfToFloatOp>("HalfToFloat", in, out, n, stream);
}

absl::Status CudaFloatToHalf(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  return Launch<FloatToHalfOp>("FloatToHalf", in, out, n, stream);
}

absl::Status CudaBFloat16ToFloat(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  return Launch<BFloat16ToFloatOp>("BFloat16ToFloat", in, out, n, stream);
}

absl::Status CudaFloatToBFloat16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  return Launch<FloatToBFloat16Op>("FloatToBFloat16", in, out, n, stream);
}

}  // namespace paddle
