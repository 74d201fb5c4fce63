// Gemm: argument checks, then one cblas_sgemm call.
#include "paddle/ops/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using internal::CheckTensor;
using internal::Describe;

// A 2-D matrix as BLAS sees it: row-major with leading dimension ld, or (transposed view of a
// row-major matrix) column-major, which BLAS takes as a transpose flag.
struct BlasMatrix {
  bool transposed = false;
  int64_t ld = 0;
};

bool AsBlas(const Tensor& t, BlasMatrix* m) {
  const int64_t rows = t.shape()[0];
  const int64_t cols = t.shape()[1];
  const int64_t rs = t.strides()[0];
  const int64_t cs = t.strides()[1];
  if (cols == 1 || cs == 1) {
    m->transposed = false;
    m->ld = std::max<int64_t>(rows == 1 ? cols : rs, 1);
    return m->ld >= cols;
  }
  if (rows == 1 || rs == 1) {
    m->transposed = true;
    m->ld = std::max<int64_t>(cols == 1 ? rows : cs, 1);
    return m->ld >= rows;
  }
  return false;
}

}  // namespace

absl::Status Gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                  float beta, Tensor* c) {
  constexpr const char* kOp = "Gemm";
  if (c == nullptr) return absl::InvalidArgumentError("Gemm: c is null");
  absl::Status s = CheckTensor(kOp, "a", a, DType::kFloat32, 2);
  if (s.ok()) s = CheckTensor(kOp, "b", b, DType::kFloat32, 2);
  if (s.ok()) s = CheckTensor(kOp, "c", *c, DType::kFloat32, 2);
  if (!s.ok()) return s;
  const int64_t m = trans_a ? a.shape()[1] : a.shape()[0];
  const int64_t k = trans_a ? a.shape()[0] : a.shape()[1];
  const int64_t kb = trans_b ? b.shape()[1] : b.shape()[0];
  const int64_t n = trans_b ? b.shape()[0] : b.shape()[1];
  if (k != kb || c->shape()[0] != m || c->shape()[1] != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: op(a) ", m, "x", k, " (a ", Describe(a), trans_a ? " transposed" : "",
        ") times op(b) ", kb, "x", n, " (b ", Describe(b), trans_b ? " transposed" : "",
        ") into c ", Describe(*c), ": inner sizes or c's shape do not match"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  BlasMatrix ma, mb, mc;
  const bool c_ok = AsBlas(*c, &mc) && !mc.transposed;
  if (!c_ok) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: c ", Describe(*c), " with strides ",
                                                   ShapeToString(c->strides()),
                                                   " must be row-major with unit column stride"));
  }
  if (k == 0) {
    // op(a)op(b) is zero: c = beta * c.
    float* cp = c->data<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j)
        cp[i * mc.ld + j] = beta == 0 ? 0.0f : beta * cp[i * mc.ld + j];
    }
    return absl::OkStatus();
  }
  if (!AsBlas(a, &ma) || !AsBlas(b, &mb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: a ", Describe(a), " strides ", ShapeToString(a.strides()), " and b ", Describe(b),
        " strides ", ShapeToString(b.strides()), " must each have a unit stride"));
  }
  const bool ta = trans_a != ma.transposed;
  const bool tb = trans_b != mb.transposed;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data<float>(),
              static_cast<int>(ma.ld), b.data<float>(), static_cast<int>(mb.ld), beta,
              c->data<float>(), static_cast<int>(mc.ld));
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
