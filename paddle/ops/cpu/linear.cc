// Linear layer on OpenBLAS: forward is one GEMM with the bias preloaded into y (beta = 1), so the
// bias costs no extra pass; backward is two GEMMs and a row sum.
#include "paddle/ops/cpu/linear.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/gemm.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {

using internal::CheckTensor;
using internal::Describe;

void SumRows(const float* dy, int64_t rows, int64_t cols, float* db) {
  std::memset(db, 0, sizeof(float) * cols);
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = dy + i * cols;
    for (int64_t j = 0; j < cols; ++j) db[j] += row[j];
  }
}

absl::StatusOr<Tensor> LinearForward(const Tensor& x, const Tensor& w, const Tensor* b) {
  constexpr const char* kOp = "LinearForward";
  RETURN_IF_ERROR(CheckTensor(kOp, "x", x, DType::kFloat32, 2));
  RETURN_IF_ERROR(CheckTensor(kOp, "w", w, DType::kFloat32, 2));
  if (x.shape()[1] != w.shape()[1]) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": x ", Describe(x), " has ", x.shape()[1],
                                                   " features but w ", Describe(w), " expects ",
                                                   w.shape()[1]));
  }
  const int64_t n = x.shape()[0];
  const int64_t out = w.shape()[0];
  if (b != nullptr) {
    RETURN_IF_ERROR(CheckTensor(kOp, "b", *b, DType::kFloat32, 1));
    if (b->shape()[0] != out) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": b ", Describe(*b), " must have ", out,
                                                     " elements to match w ", Describe(w)));
    }
  }
  ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({n, out}, DType::kFloat32));
  float beta = 0.0f;
  if (b != nullptr) {
    ASSIGN_OR_RETURN(Tensor bc, b->Contiguous());
    const float* bp = bc.data<float>();
    float* yp = y.data<float>();
    for (int64_t i = 0; i < n; ++i) std::memcpy(yp + i * out, bp, sizeof(float) * out);
    beta = 1.0f;
  }
  RETURN_IF_ERROR(Gemm(false, true, 1.0f, x, w, beta, &y));
  return y;
}

absl::StatusOr<LinearGrads> LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           bool need_dx, bool need_db) {
  constexpr const char* kOp = "LinearBackward";
  RETURN_IF_ERROR(CheckTensor(kOp, "x", x, DType::kFloat32, 2));
  RETURN_IF_ERROR(CheckTensor(kOp, "w", w, DType::kFloat32, 2));
  RETURN_IF_ERROR(CheckTensor(kOp, "dy", dy, DType::kFloat32, 2));
  const int64_t n = x.shape()[0];
  const int64_t in = x.shape()[1];
  const int64_t out = w.shape()[0];
  if (w.shape()[1] != in || dy.shape()[0] != n || dy.shape()[1] != out) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": x ", Describe(x), ", w ", Describe(w), " and dy ", Describe(dy),
                     " do not fit x [N, in], w [out, in], dy [N, out]"));
  }
  LinearGrads g;
  ASSIGN_OR_RETURN(g.dw, Tensor::Empty({out, in}, DType::kFloat32));
  RETURN_IF_ERROR(Gemm(true, false, 1.0f, dy, x, 0.0f, &g.dw));
  if (need_dx) {
    ASSIGN_OR_RETURN(g.dx, Tensor::Empty({n, in}, DType::kFloat32));
    RETURN_IF_ERROR(Gemm(false, false, 1.0f, dy, w, 0.0f, &g.dx));
  }
  if (need_db) {
    ASSIGN_OR_RETURN(Tensor dyc, dy.Contiguous());
    ASSIGN_OR_RETURN(g.db, Tensor::Empty({out}, DType::kFloat32));
    SumRows(dyc.data<float>(), n, out, g.db.data<float>());
  }
  return g;
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
