// Dropout kernels: the Philox4x32-10 rounds of paddle/core/philox.cc on the device, one block of
// four words per thread step.
//
// Note [Dropout word groups]
// Element i uses word w = offset + i (mod 2^64) of the stream. Threads step over groups of four
// consecutive elements aligned to Philox blocks: with phase a = offset % 4, group g holds elements
// [4g - a, 4g - a + 4) clipped to [0, n), whose words are all in block (offset / 4 + g) mod 2^62
// (2^64 words are 2^62 blocks, so the block index wraps exactly when the CPU's word index does).
// Each block is generated once, as the CPU does per chunk.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "paddle/ops/cuda/dropout_kernels.h"
#include "paddle/ops/cuda/kernel_util.cu.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace kernels {
namespace {

// Philox::Generate(counter, key) of paddle/core/philox.cc.
__device__ __forceinline__ uint4 PhiloxGenerate(uint4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint32_t hi0 = __umulhi(kMul0, ctr.x);
    const uint32_t lo0 = kMul0 * ctr.x;
    const uint32_t hi1 = __umulhi(kMul1, ctr.z);
    const uint32_t lo1 = kMul1 * ctr.z;
    ctr = make_uint4(hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0);
  }
  return ctr;
}

__global__ void DropoutForwardKernel(const float* __restrict__ x, float* __restrict__ y,
                                     uint8_t* __restrict__ mask, int64_t n, uint32_t threshold,
                                     float scale, uint64_t seed, uint64_t stream, uint64_t offset) {
  const int64_t phase = static_cast<int64_t>(offset % 4);
  const int64_t groups = (phase + n + 3) / 4;
  const uint64_t first_block = offset / 4;
  const uint32_t key0 = static_cast<uint32_t>(seed);
  const uint32_t key1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Note [Dropout word groups].
    const uint64_t block = (first_block + static_cast<uint64_t>(g)) & ((uint64_t{1} << 62) - 1);
    const uint4 words = PhiloxGenerate(
        make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                   static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
        key0, key1);
    const uint32_t w[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * g - phase + j;
      if (i < 0 || i >= n) continue;
      const bool keep = w[j] >= threshold;
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
    }
  }
}

__global__ void DropoutBackwardKernel(const uint8_t* __restrict__ mask,
                                      const float* __restrict__ dy, float* __restrict__ dx,
                                      int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dx[i] = mask[i] != 0 ? __fmul_rn(dy[i], scale) : 0.0f;
  }
}

}  // namespace

absl::Status DropoutForward(const float* x, float* y, uint8_t* mask, int64_t n, uint32_t threshold,
                            float scale, uint64_t seed, uint64_t stream, uint64_t offset,
                            cudaStream_t cuda_stream) {
  if (n == 0) return absl::OkStatus();
  DropoutForwardKernel<<<GridFor(n + 3, 4), kBlockThreads, 0, cuda_stream>>>(
      x, y, mask, n, threshold, scale, seed, stream, offset);
  return CheckLaunch("DropoutForwardKernel", n);
}

absl::Status DropoutBackward(const uint8_t* mask, const float* dy, float* dx, int64_t n,
                             float scale, cudaStream_t cuda_stream) {
  if (n == 0) return absl::OkStatus();
  DropoutBackwardKernel<<<GridFor(n, 1), kBlockThreads, 0, cuda_stream>>>(mask, dy, dx, n, scale);
  return CheckLaunch("DropoutBackwardKernel", n);
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle
