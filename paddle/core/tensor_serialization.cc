#include "paddle/core/tensor_serialization.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace paddle {

absl::StatusOr<proto::TensorProto> TensorToProto(const Tensor& tensor) {
  if (!tensor.defined()) return absl::InvalidArgumentError("cannot serialize an undefined tensor");
  absl::StatusOr<Tensor> contiguous = tensor.Contiguous();
  if (!contiguous.ok()) return contiguous.status();
  proto::TensorProto out;
  out.set_dtype(static_cast<uint32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) out.add_shape(d);
  out.set_data(static_cast<const char*>(contiguous->data()), contiguous->nbytes());
  return out;
}

absl::StatusOr<Tensor> TensorFromProto(const proto::TensorProto& proto) {
  const DType dtype = static_cast<DType>(proto.dtype());
  if (proto.dtype() > 0xff || DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorProto has unknown dtype value ", proto.dtype()));
  }
  Shape shape(proto.shape().begin(), proto.shape().end());
  absl::StatusOr<Tensor> t = Tensor::Empty(shape, dtype);
  if (!t.ok()) return t.status();
  if (proto.data().size() != t->nbytes()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorProto of ", DTypeName(dtype),
                                                   ShapeToString(shape), " needs ", t->nbytes(),
                                                   " bytes of data, has ", proto.data().size()));
  }
  std::memcpy(t->data(), proto.data().data(), t->nbytes());
  return t;
}

}  // namespace paddle
