// Argument checks for the GPU ops; see op_checks.h.
#include "paddle/ops/cuda/op_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/cuda/cuda_allocator.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace internal {

std::string Describe(const Tensor& t) { return t.defined() ? t.ToString() : "undefined"; }

absl::Status CheckCudaTensor(const char* op, const char* name, const Tensor& t,
                             std::initializer_list<DType> dtypes, int rank) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  }
  if (!t.device().is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t),
                     " is not on a CUDA device; GPU ops take CUDA tensors (copy it with ToDevice "
                     "from paddle/core/cuda/cuda_copy.h, or call the paddle::ops::cpu op)"));
  }
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) {
    std::string names;
    for (DType d : dtypes) absl::StrAppend(&names, names.empty() ? "" : " or ", DTypeName(d));
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must be ", names));
  }
  if (rank >= 0 && t.dim() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must have ", rank, " dimensions"));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " ", Describe(t), " with strides ", ShapeToString(t.strides()),
        " must be contiguous (GPU ops take row-major tensors; make a contiguous copy first)"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                            const Tensor& b) {
  if (a.shape() == b.shape()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " ", Describe(a), " and ",
                                                 b_name, " ", Describe(b),
                                                 " must have the same shape"));
}

absl::Status CheckSameDeviceAndDType(const char* op, const char* a_name, const Tensor& a,
                                     const char* b_name, const Tensor& b) {
  if (a.device() == b.device() && a.dtype() == b.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " ", Describe(a), " and ",
                                                 b_name, " ", Describe(b),
                                                 " must be on the same device with the same "
                                                 "dtype"));
}

absl::StatusOr<Tensor> EmptyCuda(absl::Span<const int64_t> shape, DType dtype, Device device) {
  absl::StatusOr<Allocator*> allocator = CudaAllocator(device.index);
  if (!allocator.ok()) return allocator.status();
  return Tensor::Empty(shape, dtype, *allocator);
}

}  // namespace internal
}  // namespace cuda
}  // namespace ops
}  // namespace paddle
