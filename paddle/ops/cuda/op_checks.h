// Argument checks and output allocation shared by the tensor-level GPU ops of paddle/ops/cuda.
//
// Every op checks all of its arguments before anything touches the GPU, returning
// kInvalidArgument naming the op, the argument and its dtype, shape and device (so a CPU tensor
// passed to a GPU op says so), then calls UseDevice, which is where a machine without CUDA gets
// kFailedPrecondition "no CUDA device/driver: ...". GPU ops take contiguous tensors only (the CPU
// ops' channels-last activations must be made contiguous first) and return contiguous tensors
// from the CUDA caching allocator (paddle/core/cuda/cuda_allocator.h).
#ifndef PADDLE_OPS_CUDA_OP_CHECKS_H_
#define PADDLE_OPS_CUDA_OP_CHECKS_H_

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace internal {

// "float32[2, 3] on cuda:0", or "undefined".
std::string Describe(const Tensor& t);

// `t` is defined, on a CUDA device, contiguous, of one of `dtypes`, and (rank >= 0) of that rank.
absl::Status CheckCudaTensor(const char* op, const char* name, const Tensor& t,
                             std::initializer_list<DType> dtypes, int rank = -1);
// a and b have the same shape.
absl::Status CheckSameShape(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                            const Tensor& b);
// a and b are on the same device and of the same dtype.
absl::Status CheckSameDeviceAndDType(const char* op, const char* a_name, const Tensor& a,
                                     const char* b_name, const Tensor& b);

// Uninitialized contiguous tensor on `device` (a CUDA device, already checked by UseDevice).
absl::StatusOr<Tensor> EmptyCuda(absl::Span<const int64_t> shape, DType dtype, Device device);

}  // namespace internal
}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_OP_CHECKS_H_
