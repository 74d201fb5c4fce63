// Tensor-level softmax cross-entropy; see softmax_cross_entropy.h.
#include "paddle/ops/cuda/softmax_cross_entropy.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/kernels.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

using internal::CheckCudaTensor;
using internal::Describe;

// Shapes and devices of a [N, K] fp32 matrix and its int64 [N] labels.
absl::Status CheckArgs(const char* op, const char* name, const Tensor& m, const Tensor& labels) {
  RETURN_IF_ERROR(CheckCudaTensor(op, name, m, {DType::kFloat32}, 2));
  RETURN_IF_ERROR(CheckCudaTensor(op, "labels", labels, {DType::kInt64}, 1));
  if (m.shape()[0] < 1 || m.shape()[1] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(m), " must have at least one row and class"));
  }
  if (labels.shape()[0] != m.shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": labels ", Describe(labels),
                                                   " must have one entry per row, ", m.shape()[0]));
  }
  if (labels.device() != m.device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": labels ", Describe(labels), " and ", name,
                                                   " ", Describe(m),
                                                   " must be on the same device"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SoftmaxCrossEntropyResult> SoftmaxCrossEntropyForward(const Tensor& logits,
                                                                     const Tensor& labels) {
  constexpr const char* kOp = "cuda::SoftmaxCrossEntropyForward";
  RETURN_IF_ERROR(CheckArgs(kOp, "logits", logits, labels));
  RETURN_IF_ERROR(UseDevice(logits.device()));
  const int64_t n = logits.shape()[0];
  const int64_t k = logits.shape()[1];
  const Device device = logits.device();
  const cudaStream_t stream = CurrentStream();
  SoftmaxCrossEntropyResult r;
  ASSIGN_OR_RETURN(r.probs, internal::EmptyCuda({n, k}, DType::kFloat32, device));
  ASSIGN_OR_RETURN(r.loss, internal::EmptyCuda({}, DType::kFloat32, device));
  ASSIGN_OR_RETURN(Tensor row_loss, internal::EmptyCuda({n}, DType::kFloat32, device));
  // [0]: count of bad labels (an int in the low bytes); [1]: first bad row (atomicMin from a
  // large sentinel).
  ASSIGN_OR_RETURN(Tensor flags, internal::EmptyCuda({2}, DType::kInt64, device));
  int64_t* flag_ptr = flags.data<int64_t>();
  PADDLE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag_ptr, 0, sizeof(int64_t), stream));
  PADDLE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag_ptr + 1, 0x7f, sizeof(int64_t), stream));
  RETURN_IF_ERROR(kernels::SoftmaxCrossEntropyForward(
      logits.data<float>(), labels.data<int64_t>(), n, k, r.probs.data<float>(),
      row_loss.data<float>(), reinterpret_cast<int*>(flag_ptr), flag_ptr + 1, stream));
  RETURN_IF_ERROR(kernels::Sum(DType::kFloat32, row_loss.data(), n,
                               static_cast<float>(1.0 / static_cast<double>(n)),
                               r.loss.data<float>(), stream));
  int64_t host_flags[2] = {0, 0};
  PADDLE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_flags, flag_ptr, sizeof(host_flags), cudaMemcpyDeviceToHost, stream));
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  int bad = 0;
  std::memcpy(&bad, &host_flags[0], sizeof(bad));
  if (bad != 0) {
    const int64_t row = host_flags[1];
    int64_t value = 0;
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(&value, labels.data<int64_t>() + row, sizeof(value), cudaMemcpyDeviceToHost));
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": labels[", row, "] = ", value,
                                                   " is outside [0, ", k, ") (", bad,
                                                   " bad labels in all)"));
  }
  return r;
}

absl::StatusOr<Tensor> SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels,
                                                   float dloss) {
  constexpr const char* kOp = "cuda::SoftmaxCrossEntropyBackward";
  RETURN_IF_ERROR(CheckArgs(kOp, "probs", probs, labels));
  RETURN_IF_ERROR(UseDevice(probs.device()));
  const int64_t n = probs.shape()[0];
  const int64_t k = probs.shape()[1];
  ASSIGN_OR_RETURN(Tensor dx, internal::EmptyCuda({n, k}, DType::kFloat32, probs.device()));
  RETURN_IF_ERROR(kernels::SoftmaxCrossEntropyBackward(probs.data<float>(), labels.data<int64_t>(),
                                                       n, k, dloss / static_cast<float>(n),
                                                       dx.data<float>(), CurrentStream()));
  return dx;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
