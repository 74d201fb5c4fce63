// Softmax cross-entropy: one pass per row for the max, one for exp and the sum; the mean over rows
// is accumulated in double in row order.
#include "paddle/ops/cpu/softmax_cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using internal::CheckTensor;
using internal::Describe;

// Checks labels int64 [n] with every value in [0, k).
absl::StatusOr<Tensor> CheckLabels(const char* op, const Tensor& labels, int64_t n, int64_t k) {
  RETURN_IF_ERROR(CheckTensor(op, "labels", labels, DType::kInt64, 1));
  if (labels.shape()[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": labels ", Describe(labels), " must have one entry per row, ", n));
  }
  ASSIGN_OR_RETURN(Tensor lc, labels.Contiguous());
  const int64_t* lp = lc.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (lp[i] < 0 || lp[i] >= k) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": labels[", i, "] = ", lp[i], " is outside [0, ", k, ")"));
    }
  }
  return lc;
}

}  // namespace

absl::StatusOr<SoftmaxCrossEntropyResult> SoftmaxCrossEntropyForward(const Tensor& logits,
                                                                     const Tensor& labels) {
  constexpr const char* kOp = "SoftmaxCrossEntropyForward";
  RETURN_IF_ERROR(CheckTensor(kOp, "logits", logits, DType::kFloat32, 2));
  const int64_t n = logits.shape()[0];
  const int64_t k = logits.shape()[1];
  if (n < 1 || k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": logits ", Describe(logits), " must have at least one row and class"));
  }
  ASSIGN_OR_RETURN(Tensor lc, CheckLabels(kOp, labels, n, k));
  ASSIGN_OR_RETURN(Tensor xc, logits.Contiguous());
  SoftmaxCrossEntropyResult r;
  ASSIGN_OR_RETURN(r.probs, Tensor::Empty({n, k}, DType::kFloat32));
  ASSIGN_OR_RETURN(r.loss, Tensor::Empty({}, DType::kFloat32));
  const float* xp = xc.data<float>();
  const int64_t* lp = lc.data<int64_t>();
  float* pp = r.probs.data<float>();
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = xp + i * k;
    float* prow = pp + i * k;
    float max = row[0];
    for (int64_t j = 1; j < k; ++j) max = std::max(max, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      prow[j] = std::exp(row[j] - max);
      sum += prow[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < k; ++j) prow[j] *= inv;
    // -log softmax[label] = log(sum) - (x[label] - max).
    total += static_cast<double>(std::log(sum)) - static_cast<double>(row[lp[i]] - max);
  }
  *r.loss.data<float>() = static_cast<float>(total / static_cast<double>(n));
  return r;
}

absl::StatusOr<Tensor> SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels,
                                                   float dloss) {
  constexpr const char* kOp = "SoftmaxCrossEntropyBackward";
  RETURN_IF_ERROR(CheckTensor(kOp, "probs", probs, DType::kFloat32, 2));
  const int64_t n = probs.shape()[0];
  const int64_t k = probs.shape()[1];
  if (n < 1 || k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": probs ", Describe(probs), " must have at least one row and class"));
  }
  ASSIGN_OR_RETURN(Tensor lc, CheckLabels(kOp, labels, n, k));
  ASSIGN_OR_RETURN(Tensor pc, probs.Contiguous());
  ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty({n, k}, DType::kFloat32));
  const float scale = dloss / static_cast<float>(n);
  const float* pp = pc.data<float>();
  const int64_t* lp = lc.data<int64_t>();
  float* dp = dx.data<float>();
  for (int64_t i = 0; i < n * k; ++i) dp[i] = pp[i] * scale;
  for (int64_t i = 0; i < n; ++i) dp[i * k + lp[i]] -= scale;
  return dx;
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
