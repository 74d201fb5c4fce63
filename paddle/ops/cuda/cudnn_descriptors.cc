// cuDNN descriptor wrappers; see cudnn_descriptors.h.
#include "paddle/ops/cuda/cudnn_descriptors.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace internal {
namespace {

cudnnStatus_t CreateRaw(cudnnTensorDescriptor_t* d) { return cudnnCreateTensorDescriptor(d); }
cudnnStatus_t CreateRaw(cudnnFilterDescriptor_t* d) { return cudnnCreateFilterDescriptor(d); }
cudnnStatus_t CreateRaw(cudnnConvolutionDescriptor_t* d) {
  return cudnnCreateConvolutionDescriptor(d);
}
cudnnStatus_t CreateRaw(cudnnPoolingDescriptor_t* d) { return cudnnCreatePoolingDescriptor(d); }

void DestroyRaw(cudnnTensorDescriptor_t d) { cudnnDestroyTensorDescriptor(d); }
void DestroyRaw(cudnnFilterDescriptor_t d) { cudnnDestroyFilterDescriptor(d); }
void DestroyRaw(cudnnConvolutionDescriptor_t d) { cudnnDestroyConvolutionDescriptor(d); }
void DestroyRaw(cudnnPoolingDescriptor_t d) { cudnnDestroyPoolingDescriptor(d); }

}  // namespace

template <typename T>
CudnnDescriptor<T>::~CudnnDescriptor() {
  if (desc_ != nullptr) DestroyRaw(desc_);
}

template <typename T>
absl::Status CudnnDescriptor<T>::Create() {
  if (desc_ != nullptr) return absl::OkStatus();
  PADDLE_CUDNN_RETURN_IF_ERROR(CreateRaw(&desc_));
  return absl::OkStatus();
}

template class CudnnDescriptor<cudnnTensorDescriptor_t>;
template class CudnnDescriptor<cudnnFilterDescriptor_t>;
template class CudnnDescriptor<cudnnConvolutionDescriptor_t>;
template class CudnnDescriptor<cudnnPoolingDescriptor_t>;

absl::Status CheckIntRange(const char* op, const Tensor& t) {
  for (int64_t d : t.shape()) {
    if (d > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", Describe(t), " has a dimension of ",
                                                     d, " beyond cuDNN's int range"));
    }
  }
  if (t.numel() > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", Describe(t), " has ", t.numel(),
                                                   " elements, beyond cuDNN's int strides"));
  }
  return absl::OkStatus();
}

absl::StatusOr<cudnnTensorDescriptor_t> MakeNchw(TensorDescriptor* desc, int64_t n, int64_t c,
                                                 int64_t h, int64_t w) {
  RETURN_IF_ERROR(desc->Create());
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      desc->get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n), static_cast<int>(c),
      static_cast<int>(h), static_cast<int>(w)));
  return desc->get();
}

}  // namespace internal
}  // namespace cuda
}  // namespace ops
}  // namespace paddle
