// Tensor-level reductions; see reduce.h.
#include "paddle/ops/cuda/reduce.h"

#include <limits>

#include "paddle/core/status.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/kernels.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16,
                                                      DType::kBFloat16};

absl::StatusOr<Tensor> Total(const char* op, const Tensor& x, bool mean) {
  RETURN_IF_ERROR(internal::CheckCudaTensor(op, "x", x, kFloatTypes));
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(Tensor out, internal::EmptyCuda({}, DType::kFloat32, x.device()));
  float scale = 1.0f;
  if (mean) {
    scale = x.numel() == 0 ? std::numeric_limits<float>::quiet_NaN()
                           : static_cast<float>(1.0 / static_cast<double>(x.numel()));
  }
  RETURN_IF_ERROR(
      kernels::Sum(x.dtype(), x.data(), x.numel(), scale, out.data<float>(), CurrentStream()));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Sum(const Tensor& x) { return Total("cuda::Sum", x, false); }
absl::StatusOr<Tensor> Mean(const Tensor& x) { return Total("cuda::Mean", x, true); }

absl::StatusOr<Tensor> SumRows(const Tensor& x) {
  constexpr const char* kOp = "cuda::SumRows";
  RETURN_IF_ERROR(internal::CheckCudaTensor(kOp, "x", x, kFloatTypes, 2));
  RETURN_IF_ERROR(UseDevice(x.device()));
  const int64_t rows = x.shape()[0];
  const int64_t cols = x.shape()[1];
  ASSIGN_OR_RETURN(Tensor out, internal::EmptyCuda({cols}, x.dtype(), x.device()));
  RETURN_IF_ERROR(kernels::SumRows(x.dtype(), x.data(), rows, cols, out.data(), CurrentStream()));
  return out;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
