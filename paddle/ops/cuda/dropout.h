// Inverted dropout on CUDA tensors: the GPU twin of paddle/ops/cpu/dropout.h, same names, result
// struct and semantics in namespace paddle::ops::cuda.
//
// The mask is the CPU op's bit for bit: element i is kept when 32-bit word `offset + i` of
// paddle::Philox(seed, stream) is >= floor(p * 2^32), computed on the device by the same
// Philox4x32-10 rounds (dropout.cu). So a (seed, stream, offset) gives the same mask on either
// device. Contiguous fp32 x and dy, uint8 mask (1 = kept), all of one shape (op_checks.h).
#ifndef PADDLE_OPS_CUDA_DROPOUT_H_
#define PADDLE_OPS_CUDA_DROPOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/dropout.h"

namespace paddle {
namespace ops {
namespace cuda {

using DropoutResult = cpu::DropoutResult;  // y = x * mask / (1 - p); mask uint8

// p in [0, 1).
absl::StatusOr<DropoutResult> DropoutForward(const Tensor& x, double p, uint64_t seed,
                                             uint64_t stream, uint64_t offset);
// dx = dy * mask / (1 - p).
absl::StatusOr<Tensor> DropoutBackward(const Tensor& mask, const Tensor& dy, double p);

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_DROPOUT_H_
