// Tensor: a typed, shaped, strided view of a Storage.
//
// Copying a Tensor copies the view, not the data: views, slices and transposes share storage and
// cost no memory traffic, which is what lets the gradient reducer keep gradients as views into
// its buckets. Shapes and strides count elements; `storage_offset` is where element [0, ..., 0]
// sits in the storage, also in elements. Anything that could index out of bounds (a bad shape, a
// slice past the end, an index out of range) returns a Status naming the shape and the value.
// Copies between layouts (Contiguous, CopyFrom) work on CPU tensors; CUDA copies belong to
// paddle/core/cuda.
#ifndef PADDLE_CORE_TENSOR_H_
#define PADDLE_CORE_TENSOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/core/allocator.h"
#include "paddle/core/device.h"
#include "paddle/core/dtype.h"
#include "paddle/core/logging.h"
#include "paddle/core/storage.h"

namespace paddle {

using Shape = absl::InlinedVector<int64_t, 6>;

// "[2, 3, 4]"
std::string ShapeToString(absl::Span<const int64_t> shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage, dim 0, numel 0

  // Uninitialized memory from `allocator`, contiguous.
  static absl::StatusOr<Tensor> Empty(absl::Span<const int64_t> shape, DType dtype,
                                      Allocator* allocator = CpuAllocator());
  // Zero-filled (CPU allocators only; a CUDA allocator is rejected with a message).
  static absl::StatusOr<Tensor> Zeros(absl::Span<const int64_t> shape, DType dtype,
                                      Allocator* allocator = CpuAllocator());
  // A view of memory owned elsewhere. Empty `strides` means contiguous. `release` runs when the
  // last view is gone. The caller guarantees `data` covers every element the strides reach.
  static absl::StatusOr<Tensor> FromBlob(void* data, absl::Span<const int64_t> shape, DType dtype,
                                         Device device, std::function<void(void*)> release = {},
                                         absl::Span<const int64_t> strides = {});

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::Cpu(); }
  int dim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t storage_offset() const { return offset_; }
  int64_t numel() const { return numel_; }
  size_t element_size() const { return DTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  // Address of element [0, ..., 0].
  void* data() const {
    return storage_ ? static_cast<char*>(storage_->data()) + offset_ * element_size() : nullptr;
  }
  // Typed access; a dtype mismatch is a programming error and aborts with both dtypes.
  template <typename T>
  T* data() const {
    PADDLE_CHECK(DTypeOf<T>::value == dtype_)
        << "data<" << DTypeName(DTypeOf<T>::value) << ">() on a " << DTypeName(dtype_) << " tensor";
    return static_cast<T*>(data());
  }

  // Element offset (from data()) of `index`; negative indices count from the end.
  absl::StatusOr<int64_t> ElementOffset(absl::Span<const int64_t> index) const;
  template <typename T>
  absl::StatusOr<T*> At(absl::Span<const int64_t> index) const {
    absl::StatusOr<int64_t> off = ElementOffset(index);
    if (!off.ok()) return off.status();
    return data<T>() + *off;
  }

  // Same elements, new shape (one entry may be -1); needs a contiguous tensor.
  absl::StatusOr<Tensor> View(absl::Span<const int64_t> shape) const;
  // Elements start, start+step, ... < end of dimension `dim` (negative dim/start/end count from
  // the end; end is clamped to the size, as Python slicing does); step > 0.
  absl::StatusOr<Tensor> Slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Drops dimension `dim`, keeping index `index` of it.
  absl::StatusOr<Tensor> Select(int dim, int64_t index) const;
  absl::StatusOr<Tensor> Transpose(int dim0, int dim1) const;
  // This tensor if contiguous (sharing storage), else a contiguous copy (CPU).
  absl::StatusOr<Tensor> Contiguous() const;
  // A contiguous deep copy (CPU).
  absl::StatusOr<Tensor> Clone() const;
  // Copies `src` element by element into this tensor: same shape and dtype, any strides (CPU).
  // Bumps the version (Note [Version counters] in storage.h).
  absl::Status CopyFrom(const Tensor& src);

  // Note [Version counters] in storage.h: in-place writes to the storage so far (0 when
  // undefined); an API that writes into an existing tensor calls BumpVersion.
  uint64_t version() const { return storage_ ? storage_->version() : 0; }
  void BumpVersion() const {
    if (storage_) storage_->BumpVersion();
  }

  // "float32[2, 3] on cpu"
  std::string ToString() const;

 private:
  absl::StatusOr<int> NormalizeDim(int dim, const char* op) const;
  // CopyFrom without the version bump (Clone fills a tensor nobody else sees).
  absl::Status CopyElementsFrom(const Tensor& src);

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::kFloat32;
};

}  // namespace paddle

#endif  // PADDLE_CORE_TENSOR_H_
