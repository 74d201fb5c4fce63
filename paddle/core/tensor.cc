#include "paddle/core/tensor.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle {
namespace {

Shape ContiguousStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return strides;
}

// The element count of `shape`, or an error for a negative dimension or a byte size that does
// not fit in int64.
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape, DType dtype) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (elem == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype value ", static_cast<int>(dtype)));
  }
  int64_t numel = 1;
  bool overflow = false;
  bool has_zero = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", d, " of shape ", ShapeToString(shape), " is negative"));
    }
    if (shape[d] == 0) {
      has_zero = true;
    } else if (numel > std::numeric_limits<int64_t>::max() / elem / shape[d]) {
      overflow = true;  // keep scanning: a later 0 makes the tensor empty, and legal
    } else {
      numel *= shape[d];
    }
  }
  if (has_zero) return 0;
  if (overflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeToString(shape), " of ", DTypeName(dtype), " needs more than 2^63 bytes"));
  }
  return numel;
}

}  // namespace

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<Tensor> Tensor::Empty(absl::Span<const int64_t> shape, DType dtype,
                                     Allocator* allocator) {
  absl::StatusOr<int64_t> numel = CheckedNumel(shape, dtype);
  if (!numel.ok()) return numel.status();
  absl::StatusOr<std::shared_ptr<Storage>> storage =
      Storage::Allocate(static_cast<size_t>(*numel) * DTypeSize(dtype), allocator);
  if (!storage.ok()) return storage.status();
  Tensor t;
  t.storage_ = *std::move(storage);
  t.shape_ = Shape(shape.begin(), shape.end());
  t.strides_ = ContiguousStrides(shape);
  t.numel_ = *numel;
  t.dtype_ = dtype;
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(absl::Span<const int64_t> shape, DType dtype,
                                     Allocator* allocator) {
  if (!allocator->device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat("Tensor::Zeros fills host memory only; got an ",
                                                 allocator->device().ToString(), " allocator"));
  }
  absl::StatusOr<Tensor> t = Empty(shape, dtype, allocator);
  if (t.ok()) std::memset(t->data(), 0, t->nbytes());
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBlob(void* data, absl::Span<const int64_t> shape, DType dtype,
                                        Device device, std::function<void(void*)> release,
                                        absl::Span<const int64_t> strides) {
  absl::StatusOr<int64_t> numel = CheckedNumel(shape, dtype);
  if (!numel.ok()) return numel.status();
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strides ", ShapeToString(strides), " do not match shape ", ShapeToString(shape), " (",
        strides.size(), " vs ", shape.size(), " dimensions)"));
  }
  int64_t extent = 1;  // elements spanned by the view
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative stride ", strides[d], " in dimension ", d, " is not supported"));
    }
    if (shape[d] > 0) extent += (shape[d] - 1) * strides[d];
  }
  if (strides.empty()) extent = *numel;
  if (data == nullptr && *numel > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("null data for a tensor of shape ", ShapeToString(shape)));
  }
  Tensor t;
  t.storage_ = Storage::Wrap(data, *numel == 0 ? 0 : static_cast<size_t>(extent) * DTypeSize(dtype),
                             device, std::move(release));
  t.shape_ = Shape(shape.begin(), shape.end());
  t.strides_ = strides.empty() ? ContiguousStrides(shape) : Shape(strides.begin(), strides.end());
  t.numel_ = *numel;
  t.dtype_ = dtype;
  return t;
}

bool Tensor::is_contiguous() const {
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape_[d] == 1) continue;  // the stride of a size-1 dimension never matters
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

absl::StatusOr<int> Tensor::NormalizeDim(int dim, const char* op) const {
  const int n = this->dim();
  if (dim < -n || dim >= n) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dimension ", dim,
                                                   " is out of range for shape ",
                                                   ShapeToString(shape_), " (", n, " dims)"));
  }
  return dim < 0 ? dim + n : dim;
}

absl::StatusOr<int64_t> Tensor::ElementOffset(absl::Span<const int64_t> index) const {
  if (static_cast<int>(index.size()) != dim()) {
    return absl::InvalidArgumentError(absl::StrCat("index ", ShapeToString(index), " has ",
                                                   index.size(), " entries for shape ",
                                                   ShapeToString(shape_)));
  }
  int64_t offset = 0;
  for (int d = 0; d < dim(); ++d) {
    int64_t i = index[d];
    if (i < -shape_[d] || i >= shape_[d]) {
      return absl::OutOfRangeError(absl::StrCat("index ", ShapeToString(index),
                                                " is out of range for shape ",
                                                ShapeToString(shape_), " in dimension ", d));
    }
    if (i < 0) i += shape_[d];
    offset += i * strides_[d];
  }
  return offset;
}

absl::StatusOr<Tensor> Tensor::View(absl::Span<const int64_t> shape) const {
  Shape resolved(shape.begin(), shape.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < resolved.size(); ++d) {
    if (resolved[d] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("View ", ShapeToString(shape), ": only one dimension may be -1"));
      }
      infer = static_cast<int>(d);
    } else if (resolved[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("View ", ShapeToString(shape), ": dimension ", d, " is negative"));
    } else {
      known *= resolved[d];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel_ % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot view shape ", ShapeToString(shape_), " (", numel_, " elements) as ",
                       ShapeToString(shape), ": -1 is ambiguous or not whole"));
    }
    resolved[infer] = numel_ / known;
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(resolved, dtype_);
  if (!numel.ok()) return numel.status();
  if (*numel != numel_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot view shape ", ShapeToString(shape_), " (", numel_, " elements) as ",
                     ShapeToString(resolved), " (", *numel, " elements)"));
  }
  if (!is_contiguous()) {
    return absl::FailedPreconditionError(
        absl::StrCat("View ", ShapeToString(resolved), " needs a contiguous tensor; shape ",
                     ShapeToString(shape_), " has strides ", ShapeToString(strides_),
                     "; call Contiguous() first"));
  }
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = ContiguousStrides(resolved);
  return t;
}

absl::StatusOr<Tensor> Tensor::Slice(int dim, int64_t start, int64_t end, int64_t step) const {
  absl::StatusOr<int> d = NormalizeDim(dim, "Slice");
  if (!d.ok()) return d.status();
  const int64_t size = shape_[*d];
  if (step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Slice step must be positive, got ", step));
  }
  const int64_t first = start < 0 ? start + size : start;
  if (first < 0 || first > size) {
    return absl::OutOfRangeError(absl::StrCat("Slice start ", start,
                                              " is out of range for dimension ", *d, " of size ",
                                              size, " (shape ", ShapeToString(shape_), ")"));
  }
  int64_t last = end < 0 ? end + size : end;
  if (last > size) last = size;
  const int64_t count = last > first ? (last - first + step - 1) / step : 0;
  Tensor t = *this;
  t.offset_ += first * strides_[*d];
  t.shape_[*d] = count;
  t.strides_[*d] *= step;
  t.numel_ = size == 0 ? 0 : numel_ / size * count;
  return t;
}

absl::StatusOr<Tensor> Tensor::Select(int dim, int64_t index) const {
  absl::StatusOr<int> d = NormalizeDim(dim, "Select");
  if (!d.ok()) return d.status();
  const int64_t size = shape_[*d];
  if (index < -size || index >= size) {
    return absl::OutOfRangeError(absl::StrCat("Select index ", index,
                                              " is out of range for dimension ", *d, " of size ",
                                              size, " (shape ", ShapeToString(shape_), ")"));
  }
  if (index < 0) index += size;
  Tensor t = *this;
  t.offset_ += index * strides_[*d];
  t.shape_.erase(t.shape_.begin() + *d);
  t.strides_.erase(t.strides_.begin() + *d);
  t.numel_ = numel_ / size;
  return t;
}

absl::StatusOr<Tensor> Tensor::Transpose(int dim0, int dim1) const {
  absl::StatusOr<int> a = NormalizeDim(dim0, "Transpose");
  if (!a.ok()) return a.status();
  absl::StatusOr<int> b = NormalizeDim(dim1, "Transpose");
  if (!b.ok()) return b.status();
  Tensor t = *this;
  std::swap(t.shape_[*a], t.shape_[*b]);
  std::swap(t.strides_[*a], t.strides_[*b]);
  return t;
}

absl::StatusOr<Tensor> Tensor::Contiguous() const {
  if (is_contiguous()) return *this;
  return Clone();
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  if (!defined()) return absl::FailedPreconditionError("Clone of an undefined tensor");
  if (!device().is_cpu()) {
    return absl::UnimplementedError(
        absl::StrCat("Clone of a ", device().ToString(), " tensor needs the CUDA copy path"));
  }
  absl::StatusOr<Tensor> copy = Empty(shape_, dtype_);
  if (!copy.ok()) return copy.status();
  absl::Status s = copy->CopyElementsFrom(*this);  // a fresh tensor: version 0
  if (!s.ok()) return s;
  return copy;
}

namespace {

// One row of a strided copy; T has the element's size (every dtype is 1, 2, 4 or 8 bytes).
template <typename T>
void CopyRow(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t count) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  for (int64_t i = 0; i < count; ++i) d[i * dst_step] = s[i * src_step];
}

}  // namespace

absl::Status Tensor::CopyFrom(const Tensor& src) {
  absl::Status s = CopyElementsFrom(src);
  if (s.ok()) BumpVersion();  // Note [Version counters]
  return s;
}

absl::Status Tensor::CopyElementsFrom(const Tensor& src) {
  if (!defined() || !src.defined()) {
    return absl::FailedPreconditionError("CopyFrom with an undefined tensor");
  }
  if (src.dtype_ != dtype_ || src.shape_ != shape_) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: source ", src.ToString(),
                                                   " does not match destination ", ToString()));
  }
  if (!device().is_cpu() || !src.device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat("CopyFrom ", src.device().ToString(), " to ",
                                                 device().ToString(), " needs the CUDA copy path"));
  }
  if (numel_ == 0) return absl::OkStatus();
  const size_t elem = element_size();
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(data(), src.data(), nbytes());
    return absl::OkStatus();
  }
  // Walk the index space in row-major order, a row (the innermost dimension) at a time. When both
  // innermost strides are 1 a row is one memcpy; otherwise (a transposed or channels-last view)
  // a typed strided loop, with the row's start computed once.
  const int n = dim();
  const int64_t inner = shape_[n - 1];
  const int64_t dst_step = strides_[n - 1];
  const int64_t src_step = src.strides_[n - 1];
  const bool rows = dst_step == 1 && src_step == 1;
  Shape index(n - 1, 0);
  char* dst_base = static_cast<char*>(data());
  const char* src_base = static_cast<const char*>(src.data());
  for (int64_t done = 0; done < numel_; done += inner) {
    int64_t dst_off = 0, src_off = 0;
    for (int d = 0; d < n - 1; ++d) {
      dst_off += index[d] * strides_[d];
      src_off += index[d] * src.strides_[d];
    }
    char* dst_row = dst_base + dst_off * elem;
    const char* src_row = src_base + src_off * elem;
    if (rows) {
      std::memcpy(dst_row, src_row, inner * elem);
    } else {
      switch (elem) {
        case 1:
          CopyRow<uint8_t>(dst_row, dst_step, src_row, src_step, inner);
          break;
        case 2:
          CopyRow<uint16_t>(dst_row, dst_step, src_row, src_step, inner);
          break;
        case 4:
          CopyRow<uint32_t>(dst_row, dst_step, src_row, src_step, inner);
          break;
        default:
          CopyRow<uint64_t>(dst_row, dst_step, src_row, src_step, inner);
          break;
      }
    }
    for (int d = n - 2; d >= 0; --d) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  return absl::OkStatus();
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined tensor";
  return absl::StrCat(DTypeName(dtype_), ShapeToString(shape_), " on ", device().ToString());
}

}  // namespace paddle
