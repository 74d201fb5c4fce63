// Names of the dtypes, for errors, logs and command-line flags. One table holds the canonical
// name and the accepted aliases of each dtype, so printing and parsing cannot drift apart.
#include "paddle/core/dtype.h"

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle {
namespace {

struct DTypeNames {
  DType dtype;
  absl::string_view name;  // canonical, first in error messages
  std::initializer_list<absl::string_view> aliases;
};

// Aliases follow PyTorch/NumPy ("half", "double") and the short forms used in configs ("fp16").
const DTypeNames kDTypeNames[] = {
    {DType::kFloat32, "float32", {"fp32", "f32", "float"}},
    {DType::kFloat64, "float64", {"fp64", "f64", "double"}},
    {DType::kFloat16, "float16", {"fp16", "f16", "half"}},
    {DType::kBFloat16, "bfloat16", {"bf16"}},
    {DType::kInt8, "int8", {"i8"}},
    {DType::kUInt8, "uint8", {"u8"}},
    {DType::kInt32, "int32", {"i32", "int"}},
    {DType::kInt64, "int64", {"i64", "long"}},
    {DType::kBool, "bool", {}},
};

}  // namespace

absl::string_view DTypeName(DType dtype) {
  for (const DTypeNames& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  std::string valid;
  for (const DTypeNames& entry : kDTypeNames) {
    if (absl::EqualsIgnoreCase(name, entry.name)) return entry.dtype;
    for (absl::string_view alias : entry.aliases) {
      if (absl::EqualsIgnoreCase(name, alias)) return entry.dtype;
    }
    absl::StrAppend(&valid, valid.empty() ? "" : ", ", entry.name);
    if (entry.aliases.size() > 0) {
      absl::StrAppend(&valid, " (", absl::StrJoin(entry.aliases, ", "), ")");
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\"; valid names: ", valid));
}

}  // namespace paddle
