// Element types of the tensors that Paddle Collective moves and reduces. A DType travels in wire
// headers and in the cross-rank consistency check, so it is one byte with stable values: append
// new types at the end, never renumber. `DTypeOf<T>::value` maps a C++ element type to its DType
// at compile time, which lets templated kernels and typed buffers name their dtype without a
// hand-written table at every call site.
#ifndef PADDLE_CORE_DTYPE_H_
#define PADDLE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/core/half.h"

namespace paddle {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
};

// Bytes per element; 0 for a value outside the enum (e.g. a corrupted wire header), so that a
// size check against it fails instead of reading past a buffer.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

constexpr bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

// The canonical name ("float32", "bfloat16", ...), as printed in errors and logs; "invalid" for
// a value outside the enum.
absl::string_view DTypeName(DType dtype);

// Accepts the canonical names and the usual short forms ("fp32", "f32", "float", "bf16", "i64",
// ...), ignoring case. The error lists every accepted name.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// DTypeOf<T>::value is the DType of element type T. Deliberately undefined for other types
// (char, long long, ...) so that a typo or an unsupported type fails to compile.
template <typename T>
struct DTypeOf;

#define PADDLE_DEFINE_DTYPE_OF_(type, dtype)     \
  template <>                                    \
  struct DTypeOf<type> {                         \
    static constexpr DType value = DType::dtype; \
  }

PADDLE_DEFINE_DTYPE_OF_(float, kFloat32);
PADDLE_DEFINE_DTYPE_OF_(double, kFloat64);
PADDLE_DEFINE_DTYPE_OF_(Half, kFloat16);
PADDLE_DEFINE_DTYPE_OF_(BFloat16, kBFloat16);
PADDLE_DEFINE_DTYPE_OF_(int8_t, kInt8);
PADDLE_DEFINE_DTYPE_OF_(uint8_t, kUInt8);
PADDLE_DEFINE_DTYPE_OF_(int32_t, kInt32);
PADDLE_DEFINE_DTYPE_OF_(int64_t, kInt64);
PADDLE_DEFINE_DTYPE_OF_(bool, kBool);

#undef PADDLE_DEFINE_DTYPE_OF_

}  // namespace paddle

#endif  // PADDLE_CORE_DTYPE_H_
