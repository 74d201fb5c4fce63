#include "paddle/core/env.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

// The variable's value without surrounding whitespace; nullopt when unset or blank.
std::optional<std::string> Value(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return std::nullopt;
  absl::string_view value = absl::StripAsciiWhitespace(raw);
  if (value.empty()) return std::nullopt;
  return std::string(value);
}

absl::Status Malformed(const char* name, absl::string_view value, absl::string_view accepted,
                       absl::string_view meaning) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=\"", value, "\" is not ", accepted,
                   meaning.empty() ? "" : absl::StrCat(" (", meaning, ")"),
                   "; set it to one or unset it for the default"));
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> IntFromEnv(const char* name, int64_t min, int64_t max,
                                                  absl::string_view meaning) {
  std::optional<std::string> value = Value(name);
  if (!value.has_value()) return std::optional<int64_t>();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < min || parsed > max) {
    return Malformed(name, *value, absl::StrCat("an integer from ", min, " to ", max), meaning);
  }
  return std::optional<int64_t>(parsed);
}

absl::StatusOr<std::optional<bool>> BoolFromEnv(const char* name, absl::string_view meaning) {
  std::optional<std::string> value = Value(name);
  if (!value.has_value()) return std::optional<bool>();
  const std::string word = absl::AsciiStrToLower(*value);
  if (word == "1" || word == "true" || word == "yes" || word == "on") return std::optional(true);
  if (word == "0" || word == "false" || word == "no" || word == "off") return std::optional(false);
  return Malformed(name, *value, "a boolean: 1, true, yes, on or 0, false, no, off", meaning);
}

absl::StatusOr<std::optional<absl::Duration>> SecondsFromEnv(const char* name, bool inf_ok,
                                                             absl::string_view meaning) {
  std::optional<std::string> value = Value(name);
  if (!value.has_value()) return std::optional<absl::Duration>();
  double seconds = 0;
  // SimpleAtod accepts "nan" and "inf"; both are checked here rather than left to absl::Seconds,
  // which turns NaN into an infinite duration.
  const bool parsed = absl::SimpleAtod(*value, &seconds) && !std::isnan(seconds) && seconds >= 0;
  absl::Duration duration = parsed ? absl::Seconds(seconds) : absl::ZeroDuration();
  // A positive value below the clock's resolution must not read as 0, which callers may take
  // as "no limit" or "off".
  if (seconds > 0 && duration == absl::ZeroDuration()) duration = absl::Nanoseconds(1);
  if (!parsed || (!inf_ok && duration == absl::InfiniteDuration())) {
    return Malformed(name, *value,
                     inf_ok ? "a number of seconds >= 0 or inf" : "a finite number of seconds >= 0",
                     meaning);
  }
  return std::optional<absl::Duration>(duration);
}

}  // namespace paddle
