// Settings read from environment variables.
//
// Note [Environment settings]: numeric and boolean PADDLE_* variables are read through these
// functions, so a value that is set is either used as given or rejected with kInvalidArgument
// naming the variable, its value and what it accepts; a typo never silently becomes the default.
// Unset, empty or all-whitespace means "not given": std::nullopt, and the caller's default
// applies. Surrounding whitespace is ignored; anything else after the number is an error.
//
// Each call reads the environment anew (tests change variables with setenv). Thread-safe as far
// as getenv is: no thread may call setenv at the same time.
#ifndef PADDLE_CORE_ENV_H_
#define PADDLE_CORE_ENV_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace paddle {

// An integer from `min` to `max`. `meaning` (e.g. "the socket buffer size in bytes; 0 lets the
// kernel choose") ends the error message: "PADDLE_X=\"4k\" is not an integer from 0 to 1024
// (<meaning>)".
absl::StatusOr<std::optional<int64_t>> IntFromEnv(const char* name, int64_t min, int64_t max,
                                                  absl::string_view meaning = "");

// 1/true/yes/on or 0/false/no/off, in any case.
absl::StatusOr<std::optional<bool>> BoolFromEnv(const char* name, absl::string_view meaning = "");

// Seconds as a finite decimal >= 0 ("300", "1.5", "2e-3"), or, only where `inf_ok`, "inf" for
// absl::InfiniteDuration(). NaN and negative values are errors. What 0 means is the caller's.
absl::StatusOr<std::optional<absl::Duration>> SecondsFromEnv(const char* name, bool inf_ok,
                                                             absl::string_view meaning = "");

}  // namespace paddle

#endif  // PADDLE_CORE_ENV_H_
