// Pointer-level CUDA kernels of dropout (dropout.cu), behind the tensor ops of dropout.h.
//
// Same conventions as kernels.h: device pointers to n elements, work enqueued on `stream` (an OK
// return means the launch succeeded), n == 0 launches nothing.
#ifndef PADDLE_OPS_CUDA_DROPOUT_KERNELS_H_
#define PADDLE_OPS_CUDA_DROPOUT_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace kernels {

// mask[i] = word (offset + i) of Philox(seed, stream) >= threshold ? 1 : 0 (paddle/core/philox.h's
// words, bit for bit); y[i] = mask[i] ? x[i] * scale : 0.
absl::Status DropoutForward(const float* x, float* y, uint8_t* mask, int64_t n, uint32_t threshold,
                            float scale, uint64_t seed, uint64_t stream, uint64_t offset,
                            cudaStream_t cuda_stream);
// dx[i] = mask[i] ? dy[i] * scale : 0.
absl::Status DropoutBackward(const uint8_t* mask, const float* dy, float* dx, int64_t n,
                             float scale, cudaStream_t cuda_stream);

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_DROPOUT_KERNELS_H_
