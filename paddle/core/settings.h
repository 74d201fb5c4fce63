// The table of settings: every PADDLE_* environment variable that Paddle Collective reads (the
// C++ library, the Python package, the launcher, the benchmarks) or sets for its workers, declared
// once with its type, accepted values, default and meaning.
//
// Note [Settings table]: C++ code reads a variable only through the typed readers below, which
// look the name up in the table (an undeclared name, or the wrong reader for its type, is a CHECK
// failure: a programming error) and parse it with env.h (Note [Environment settings]): unset or
// blank is std::nullopt and the caller's default applies; a malformed value is kInvalidArgument
// naming the variable, the value and what it accepts. docs/configuration.md is generated from the
// table by //paddle/core:configuration_doc, and //tests/core:settings_test fails when the
// checked-in file differs; after changing the table run
//   bazel run //paddle/core:configuration_doc > docs/configuration.md
// (bazel run executes in the output tree, so redirect from the workspace root as shown).
//
// Each read consults the environment anew, as env.h does. Thread-safe as far as getenv is.
#ifndef PADDLE_CORE_SETTINGS_H_
#define PADDLE_CORE_SETTINGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace paddle {

enum class SettingType {
  kInt,      // an integer within [min, max], and a multiple of `multiple_of`
  kBool,     // 1/true/yes/on or 0/false/no/off
  kSeconds,  // a decimal number of seconds >= 0; "inf" too where inf_ok
  kChoice,   // one of `choices` (comma-separated), in any case; read back in lower case
  kString,   // any text (a path, a name, a token); only its own reader checks it further
};

// Who reads the variable, for the documentation.
enum class SettingReader {
  kLibrary,   // the C++ library (and so every program and the Python package)
  kLauncher,  // paddlerun (tools/paddlerun) only
  kPython,    // the Python package only
  kBench,     // benchmarks only
  kWorkers,   // set by paddlerun for the workers; read by the user's program
  kBuild,     // Bazel (third_party/cuda) or tools/test: read at build time
};

struct Setting {
  const char* name;
  SettingType type;
  SettingReader reader;
  const char* default_text;    // what applies when unset, as the documentation shows it
  const char* meaning;         // one line; ends the error message for a malformed value
  const char* see = "";        // where it is described further (a doc or a Note), may be empty
  const char* details = "";    // more for the documentation only: effects, trade-offs, measurements
  int64_t min = 0;             // kInt
  int64_t max = 0;             // kInt
  int64_t multiple_of = 1;     // kInt
  bool inf_ok = false;         // kSeconds
  const char* choices = "";    // kChoice
  bool also_launcher = false;  // kLibrary variables that paddlerun reads or sets as well
};

// Every declared setting, sorted by name.
absl::Span<const Setting> AllSettings();

// The declared setting called `name`, or nullptr.
const Setting* FindSetting(absl::string_view name);

// The readers, one per type. Each CHECKs that `name` is declared with that type.
absl::StatusOr<std::optional<int64_t>> IntSetting(absl::string_view name);
absl::StatusOr<std::optional<bool>> BoolSetting(absl::string_view name);
absl::StatusOr<std::optional<absl::Duration>> SecondsSetting(absl::string_view name);
absl::StatusOr<std::optional<std::string>> ChoiceSetting(absl::string_view name);
// The value exactly as set (a path, a token: whitespace may matter); std::nullopt when unset or
// empty.
std::optional<std::string> StringSetting(absl::string_view name);

// Every declared kInt/kBool/kSeconds/kChoice variable that is set, parsed; the first error.
// Entry points may call it to report all malformed settings before any work starts.
absl::Status CheckSettings();

// docs/configuration.md: the table as Markdown.
std::string ConfigurationMarkdown();

}  // namespace paddle

#endif  // PADDLE_CORE_SETTINGS_H_
