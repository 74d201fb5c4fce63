// fp16/bf16 <-> fp32 conversion on the GPU, for the same reason as the CPU ones in
// paddle/core/half.h: reductions run in float32 while gradients travel in 16 bits. The results
// are bit for bit those of the CPU conversions (Note [Conversion semantics] in half.h), NaN
// payloads included, so a rank that converts on the GPU agrees exactly with one that converts on
// the CPU; tests/ops/cuda/convert_test.cc checks this over every 16-bit pattern.
//
// `in` and `out` are device pointers to n elements and must not overlap. The work is enqueued on
// `stream`; a returned OK means the launch succeeded, not that the kernel has finished.
#ifndef PADDLE_OPS_CUDA_CONVERT_H_
#define PADDLE_OPS_CUDA_CONVERT_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace paddle {

absl::Status CudaHalfToFloat(const uint16_t* in, float* out, size_t n, cudaStream_t stream);
absl::Status CudaFloatToHalf(const float* in, uint16_t* out, size_t n, cudaStream_t stream);
absl::Status CudaBFloat16ToFloat(const uint16_t* in, float* out, size_t n, cudaStream_t stream);
absl::Status CudaFloatToBFloat16(const float* in, uint16_t* out, size_t n, cudaStream_t stream);

}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_CONVERT_H_
