// Linear forward/backward as cuBLAS GEMMs.
//
// Note [Row-major GEMM on cuBLAS]
// cuBLAS is column-major; a row-major [r, c] buffer is the column-major [c, r] matrix, i.e. its
// transpose. So each row-major product C = A B is computed as the column-major C^T = B^T A^T:
//   y  [N, out] = x w^T  ->  y^T  [out, N]  = (w as [in, out])^T  (x as [in, N])
//   dx [N, in]  = dy w   ->  dx^T [in, N]   = (w as [in, out])    (dy as [out, N])
//   dw [out, in] = dy^T x -> dw^T [in, out] = (x as [in, N])      (dy as [out, N])^T
#include "paddle/ops/cuda/linear.h"

#include <climits>

#include "absl/strings/str_cat.h"
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

constexpr std::initializer_list<DType> kGemmTypes = {DType::kFloat32, DType::kBFloat16,
                                                     DType::kFloat16};

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Column-major C [m, n] = op(A) op(B), k the inner size, alpha 1; beta 0 or 1 (accumulate).
absl::Status Gemm(const char* op, int device, DType dtype, const GemmOptions& options,
                  cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                  const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return absl::OkStatus();
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": GEMM size ", v, " exceeds cuBLAS's int range (m ", m, ", n ", n, ", k ", k, ")"));
    }
  }
  if (k == 0) {
    // An empty inner product is 0; leave C as is when accumulating.
    if (beta != 0.0f) return absl::OkStatus();
    return kernels::Fill(dtype, c, 0.0f, m * n, CurrentStream());
  }
  ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandle(device));
  const float alpha = 1.0f;
  const cublasComputeType_t compute = (dtype == DType::kFloat32 && options.allow_tf32)
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = CudaType(dtype);
  PADDLE_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(handle, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                   &alpha, a, type, static_cast<int>(lda), b, type, static_cast<int>(ldb), &beta, c,
                   type, static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> LinearForward(const Tensor& x, const Tensor& w, const Tensor* b,
                                     const GemmOptions& options) {
  constexpr const char* kOp = "cuda::LinearForward";
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "x", x, kGemmTypes, 2));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "w", w, kGemmTypes, 2));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "w", w));
  if (x.shape()[1] != w.shape()[1]) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": x ", Describe(x), " has ", x.shape()[1],
                                                   " features but w ", Describe(w), " expects ",
                                                   w.shape()[1]));
  }
  const int64_t n = x.shape()[0];
  const int64_t in = x.shape()[1];
  const int64_t out = w.shape()[0];
  if (b != nullptr) {
    RETURN_IF_ERROR(CheckCudaTensor(kOp, "b", *b, kGemmTypes, 1));
    RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "b", *b));
    if (b->shape()[0] != out) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": b ", Describe(*b), " must have ", out,
                                                     " elements to match w ", Describe(w)));
    }
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyCuda({n, out}, x.dtype(), x.device()));
  float beta = 0.0f;
  if (b != nullptr) {
    // y = broadcast b, then the GEMM accumulates onto it: one rounding for 16-bit outputs.
    RETURN_IF_ERROR(kernels::Fill(x.dtype(), y.data(), 0.0f, y.numel(), CurrentStream()));
    RETURN_IF_ERROR(kernels::AddBiasRows(x.dtype(), y.data(), b->data(), n, out, CurrentStream()));
    beta = 1.0f;
  }
  RETURN_IF_ERROR(Gemm(kOp, x.device().index, x.dtype(), options, CUBLAS_OP_T, CUBLAS_OP_N, out, n,
                       in, w.data(), in, x.data(), in, beta, y.data(), out));
  return y;
}

absl::StatusOr<LinearGrads> LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           bool need_dx, bool need_db, const GemmOptions& options) {
  constexpr const char* kOp = "cuda::LinearBackward";
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "x", x, kGemmTypes, 2));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "w", w, kGemmTypes, 2));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "dy", dy, kGemmTypes, 2));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "w", w));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "dy", dy));
  const int64_t n = x.shape()[0];
  const int64_t in = x.shape()[1];
  const int64_t out = w.shape()[0];
  if (w.shape()[1] != in || dy.shape()[0] != n || dy.shape()[1] != out) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": x ", Describe(x), ", w ", Describe(w), " and dy ", Describe(dy),
                     " do not fit x [N, in], w [out, in], dy [N, out]"));
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  const int device = x.device().index;
  LinearGrads g;
  ASSIGN_OR_RETURN(g.dw, internal::EmptyCuda({out, in}, x.dtype(), x.device()));
  RETURN_IF_ERROR(Gemm(kOp, device, x.dtype(), options, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n,
                       x.data(), in, dy.data(), out, 0.0f, g.dw.data(), in));
  if (need_dx) {
    ASSIGN_OR_RETURN(g.dx, internal::EmptyCuda({n, in}, x.dtype(), x.device()));
    RETURN_IF_ERROR(Gemm(kOp, device, x.dtype(), options, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out,
                         w.data(), in, dy.data(), out, 0.0f, g.dx.data(), in));
  }
  if (need_db) {
    ASSIGN_OR_RETURN(g.db, internal::EmptyCuda({out}, x.dtype(), x.device()));
    RETURN_IF_ERROR(kernels::SumRows(x.dtype(), dy.data(), n, out, g.db.data(), CurrentStream()));
  }
  return g;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
