// Owning wrappers of the cuDNN descriptors used by the cuDNN-backed GPU ops (conv2d, pool2d,
// batch_norm), with the int-range checks cuDNN's 32-bit dimensions need. Internal to
// paddle/ops/cuda.
#ifndef PADDLE_OPS_CUDA_CUDNN_DESCRIPTORS_H_
#define PADDLE_OPS_CUDA_CUDNN_DESCRIPTORS_H_

#include <cudnn.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace internal {

// One cuDNN descriptor of type T, destroyed with the owner. Create() fails with cuDNN's text.
template <typename T>
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  ~CudnnDescriptor();

  absl::Status Create();
  T get() const { return desc_; }

 private:
  T desc_ = nullptr;
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t>;
using ConvolutionDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t>;
using PoolingDescriptor = CudnnDescriptor<cudnnPoolingDescriptor_t>;

// Each value fits cuDNN's int; otherwise kInvalidArgument naming `op` and the tensor.
absl::Status CheckIntRange(const char* op, const Tensor& t);

// A created fp32 NCHW (fully packed) tensor descriptor of [n, c, h, w].
absl::StatusOr<cudnnTensorDescriptor_t> MakeNchw(TensorDescriptor* desc, int64_t n, int64_t c,
                                                 int64_t h, int64_t w);

}  // namespace internal
}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_CUDNN_DESCRIPTORS_H_
