// Argument checks and output allocation shared by the CPU kernels.
#include "paddle/ops/cpu/op_checks.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace internal {

std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(DTypeName(t.dtype()), ShapeToString(t.shape()));
}

absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is undefined"));
  }
  if (t.device().type != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", t.ToString(), " is not on the CPU"));
  }
  if (t.dtype() != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must be ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype, int rank) {
  absl::Status s = CheckTensor(op, name, t, dtype);
  if (!s.ok()) return s;
  if (t.dim() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must have ", rank, " dimensions"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                            const Tensor& b) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " ", Describe(a), " and ",
                                                   b_name, " ", Describe(b),
                                                   " must have the same shape"));
  }
  return absl::OkStatus();
}

bool IsDense(const Tensor& t) {
  std::vector<int> dims;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] == 0) return true;
    if (t.shape()[d] != 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](int a, int b) { return t.strides()[a] < t.strides()[b]; });
  int64_t expected = 1;
  for (int d : dims) {
    if (t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

absl::StatusOr<Tensor> Dense(const Tensor& t) {
  if (IsDense(t)) return t;
  return t.Contiguous();
}

bool IsChannelsLast(const Tensor& t) {
  if (t.dim() != 4) return false;
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  // Size-1 dimensions may carry any stride.
  auto ok = [&](int d, int64_t expected) { return s[d] == 1 || st[d] == expected; };
  return ok(1, 1) && ok(3, s[1]) && ok(2, s[1] * s[3]) && ok(0, s[1] * s[2] * s[3]);
}

absl::StatusOr<Tensor> EmptyStrided(absl::Span<const int64_t> shape,
                                    absl::Span<const int64_t> strides, DType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  absl::StatusOr<Tensor> buf = Tensor::Empty({numel}, dtype);
  if (!buf.ok()) return buf.status();
  Tensor keep = *buf;
  return Tensor::FromBlob(
      keep.data(), shape, dtype, Device::Cpu(), [keep](void*) mutable { keep = Tensor(); },
      strides);
}

absl::StatusOr<Tensor> EmptyLike(const Tensor& like, DType dtype) {
  if (like.is_contiguous()) return Tensor::Empty(like.shape(), dtype);
  return EmptyStrided(like.shape(), like.strides(), dtype);
}

absl::StatusOr<Tensor> EmptyChannelsLast(int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t shape[4] = {n, c, h, w};
  const int64_t strides[4] = {c * h * w, 1, w * c, c};
  return EmptyStrided(shape, strides, DType::kFloat32);
}

absl::StatusOr<Tensor> MatchLayout(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides() && IsDense(t)) return t;
  absl::StatusOr<Tensor> out = EmptyLike(like, t.dtype());
  if (!out.ok()) return out.status();
  absl::Status s = out->CopyFrom(t);
  if (!s.ok()) return s;
  return out;
}

}  // namespace internal
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
