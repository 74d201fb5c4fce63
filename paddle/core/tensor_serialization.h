// Tensors to and from TensorProto (paddle/core/proto/tensor.proto): the format checkpoints and
// cross-rank model comparisons use. Parsing checks everything a file or a peer could get wrong:
// an unknown dtype, a bad shape, and a byte count that does not match the shape.
#ifndef PADDLE_CORE_TENSOR_SERIALIZATION_H_
#define PADDLE_CORE_TENSOR_SERIALIZATION_H_

#include "absl/status/statusor.h"
#include "paddle/core/proto/tensor.pb.h"
#include "paddle/core/tensor.h"

namespace paddle {

// Any CPU tensor (strided views are written contiguously).
absl::StatusOr<proto::TensorProto> TensorToProto(const Tensor& tensor);
// A new contiguous CPU tensor.
absl::StatusOr<Tensor> TensorFromProto(const proto::TensorProto& proto);

}  // namespace paddle

#endif  // PADDLE_CORE_TENSOR_SERIALIZATION_H_
