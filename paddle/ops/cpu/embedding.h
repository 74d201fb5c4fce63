// Embedding lookup (a gather of rows) and its gradient (a scatter-add into a dense table).
#ifndef PADDLE_OPS_CPU_EMBEDDING_H_
#define PADDLE_OPS_CPU_EMBEDDING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

// weight fp32 [V, D], indices int64 of any shape with values in [0, V). Returns [..., D].
absl::StatusOr<Tensor> EmbeddingForward(const Tensor& weight, const Tensor& indices);
// dy [..., D] (indices' shape plus D). Returns the dense [num_embeddings, D] gradient; rows hit
// several times sum their gradients in index order (deterministic).
absl::StatusOr<Tensor> EmbeddingBackward(const Tensor& indices, const Tensor& dy,
                                         int64_t num_embeddings);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_EMBEDDING_H_
