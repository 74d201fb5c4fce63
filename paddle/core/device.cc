#include "paddle/core/device.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paddle {

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower == "cpu") return Device::Cpu();
  if (lower == "cuda" || lower == "gpu") return Device::Cuda(0);
  int index = -1;
  for (absl::string_view prefix : {"cuda:", "gpu:"}) {
    if (absl::StartsWith(lower, prefix) &&
        absl::SimpleAtoi(absl::string_view(lower).substr(prefix.size()), &index) && index >= 0) {
      return Device::Cuda(index);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "'; use cpu, cuda or cuda:N with N >= 0"));
}

}  // namespace paddle
