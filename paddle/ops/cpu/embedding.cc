// Embedding: row copies forward, row additions backward.
#include "paddle/ops/cpu/embedding.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

// Contiguous indices, every one in [0, v).
absl::StatusOr<Tensor> CheckIndices(const char* op, const Tensor& indices, int64_t v) {
  RETURN_IF_ERROR(internal::CheckTensor(op, "indices", indices, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor ic, indices.Contiguous());
  const int64_t* ip = ic.data<int64_t>();
  for (int64_t i = 0; i < ic.numel(); ++i) {
    if (ip[i] < 0 || ip[i] >= v) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": indices (flat position ", i,
                                                     ") = ", ip[i], " is outside [0, ", v, ")"));
    }
  }
  return ic;
}

}  // namespace

absl::StatusOr<Tensor> EmbeddingForward(const Tensor& weight, const Tensor& indices) {
  constexpr const char* kOp = "EmbeddingForward";
  RETURN_IF_ERROR(internal::CheckTensor(kOp, "weight", weight, DType::kFloat32, 2));
  const int64_t v = weight.shape()[0];
  const int64_t d = weight.shape()[1];
  ASSIGN_OR_RETURN(Tensor ic, CheckIndices(kOp, indices, v));
  ASSIGN_OR_RETURN(Tensor wc, weight.Contiguous());
  Shape shape = indices.shape();
  shape.push_back(d);
  ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(shape, DType::kFloat32));
  const int64_t* ip = ic.data<int64_t>();
  const float* wp = wc.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < ic.numel(); ++i) {
    std::memcpy(yp + i * d, wp + ip[i] * d, sizeof(float) * d);
  }
  return y;
}

absl::StatusOr<Tensor> EmbeddingBackward(const Tensor& indices, const Tensor& dy,
                                         int64_t num_embeddings) {
  constexpr const char* kOp = "EmbeddingBackward";
  RETURN_IF_ERROR(internal::CheckTensor(kOp, "dy", dy, DType::kFloat32));
  if (num_embeddings < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": num_embeddings = ", num_embeddings, " is negative"));
  }
  ASSIGN_OR_RETURN(Tensor ic, CheckIndices(kOp, indices, num_embeddings));
  Shape expected = indices.shape();
  const int64_t d = dy.dim() > 0 ? dy.shape().back() : -1;
  expected.push_back(d);
  if (dy.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": dy ", internal::Describe(dy),
                                                   " must be indices' shape ",
                                                   ShapeToString(indices.shape()), " plus [D]"));
  }
  ASSIGN_OR_RETURN(Tensor dyc, dy.Contiguous());
  ASSIGN_OR_RETURN(Tensor dw, Tensor::Zeros({num_embeddings, d}, DType::kFloat32));
  const int64_t* ip = ic.data<int64_t>();
  const float* gp = dyc.data<float>();
  float* wp = dw.data<float>();
  for (int64_t i = 0; i < ic.numel(); ++i) {
    float* row = wp + ip[i] * d;
    const float* g = gp + i * d;
    for (int64_t j = 0; j < d; ++j) row[j] += g[j];
  }
  return dw;
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
