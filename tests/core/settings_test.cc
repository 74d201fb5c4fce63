// Note [Settings table]: the table is well-formed, each reader rejects a malformed value with an
// error naming the variable and the value, and docs/configuration.md matches the table.
#include "paddle/core/settings.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

// The error of `result`, checked to be kInvalidArgument naming `name` and `value`.
template <typename T>
std::string ErrorNaming(const absl::StatusOr<T>& result, const char* name, const char* value) {
  EXPECT_FALSE(result.ok()) << name << "=" << value;
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(result.status().message());
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat(name, "=\"", value, "\""))) << message;
  return message;
}

TEST(SettingsTest, TableIsSortedUniqueAndComplete) {
  std::string previous;
  for (const Setting& s : AllSettings()) {
    const std::string name = s.name;
    EXPECT_TRUE(absl::StartsWith(name, "PADDLE_")) << name;
    EXPECT_LT(previous, name) << "the table must be sorted by name, without repeats";
    previous = name;
    EXPECT_NE(std::string(s.meaning), "") << name;
    EXPECT_NE(std::string(s.default_text), "") << name;
    EXPECT_EQ(FindSetting(name), &s);
    if (s.type == SettingType::kInt) {
      EXPECT_LE(s.min, s.max) << name;
      EXPECT_GE(s.multiple_of, 1) << name;
    }
    if (s.type == SettingType::kChoice) {
      EXPECT_NE(std::string(s.choices), "") << name;
    }
  }
  EXPECT_EQ(FindSetting("PADDLE_NO_SUCH_SETTING"), nullptr);
}

TEST(SettingsTest, IntegersInRangeAndMultiplesAreAccepted) {
  ScopedEnv env("PADDLE_SHM_SLOT_BYTES", " 8192 ");
  EXPECT_EQ(IntSetting("PADDLE_SHM_SLOT_BYTES").value(), 8192);
  ScopedEnv unset("PADDLE_PIECE_BYTES", nullptr);
  EXPECT_EQ(IntSetting("PADDLE_PIECE_BYTES").value(), std::nullopt);
  ScopedEnv blank("PADDLE_TCP_BUSY_POLL_US", "  ");
  EXPECT_EQ(IntSetting("PADDLE_TCP_BUSY_POLL_US").value(), std::nullopt);
}

TEST(SettingsTest, MalformedIntegersNameTheVariableAndWhatItAccepts) {
  for (const char* bad : {"4k", "abc", "100", "1e9", "-4096", "99999999999"}) {
    ScopedEnv env("PADDLE_PIECE_BYTES", bad);
    const std::string message =
        ErrorNaming(IntSetting("PADDLE_PIECE_BYTES"), "PADDLE_PIECE_BYTES", bad);
    EXPECT_TRUE(absl::StrContains(message, "from 4096 to 1073741824")) << message;
    EXPECT_TRUE(absl::StrContains(message, "pipelined")) << message;  // the meaning
  }
  ScopedEnv env("PADDLE_SHM_SLOT_BYTES", "5000");
  const std::string message =
      ErrorNaming(IntSetting("PADDLE_SHM_SLOT_BYTES"), "PADDLE_SHM_SLOT_BYTES", "5000");
  EXPECT_TRUE(absl::StrContains(message, "multiple of 4096")) << message;
}

TEST(SettingsTest, Booleans) {
  ScopedEnv on("PADDLE_DEBUG_CHECKS", "Yes");
  EXPECT_EQ(BoolSetting("PADDLE_DEBUG_CHECKS").value(), true);
  ScopedEnv off("PADDLE_SHM_CMA", "off");
  EXPECT_EQ(BoolSetting("PADDLE_SHM_CMA").value(), false);
  ScopedEnv bad("PADDLE_CUDA_IPC", "maybe");
  ErrorNaming(BoolSetting("PADDLE_CUDA_IPC"), "PADDLE_CUDA_IPC", "maybe");
}

TEST(SettingsTest, Seconds) {
  ScopedEnv inf("PADDLE_TIMEOUT_S", "inf");
  EXPECT_EQ(SecondsSetting("PADDLE_TIMEOUT_S").value(), absl::InfiniteDuration());
  ScopedEnv half("PADDLE_STORE_TIMEOUT_S", "0.5");
  EXPECT_EQ(SecondsSetting("PADDLE_STORE_TIMEOUT_S").value(), absl::Milliseconds(500));
  // The stall warning takes no "inf"; a unit suffix is never accepted.
  ScopedEnv no_inf("PADDLE_STALL_WARNING_S", "inf");
  ErrorNaming(SecondsSetting("PADDLE_STALL_WARNING_S"), "PADDLE_STALL_WARNING_S", "inf");
  ScopedEnv suffix("PADDLE_CONNECT_TIMEOUT_S", "30s");
  ErrorNaming(SecondsSetting("PADDLE_CONNECT_TIMEOUT_S"), "PADDLE_CONNECT_TIMEOUT_S", "30s");
}

// Edge cases of the parsers behind the readers (env.h): out of int64, signs, NaN and infinities,
// overflow to infinity where inf is refused, and a positive value below the clock's resolution.
TEST(SettingsTest, ParsingEdgeCases) {
  for (const char* bad : {"9223372036854775808", "-9223372036854775809", "0x1000", "1 000"}) {
    ScopedEnv env("PADDLE_SOCKET_BUFFER_BYTES", bad);
    ErrorNaming(IntSetting("PADDLE_SOCKET_BUFFER_BYTES"), "PADDLE_SOCKET_BUFFER_BYTES", bad);
  }
  for (const char* bad : {"-1", "nan", "-inf", "1e400", "1e300"}) {
    ScopedEnv env("PADDLE_STALL_WARNING_S", bad);
    ErrorNaming(SecondsSetting("PADDLE_STALL_WARNING_S"), "PADDLE_STALL_WARNING_S", bad);
  }
  for (const char* bad : {"-1", "nan", "-inf"}) {
    ScopedEnv env("PADDLE_STORE_TIMEOUT_S", bad);
    ErrorNaming(SecondsSetting("PADDLE_STORE_TIMEOUT_S"), "PADDLE_STORE_TIMEOUT_S", bad);
  }
  ScopedEnv tiny("PADDLE_STORE_TIMEOUT_S", "1e-12");  // not 0, which would mean "no limit"
  EXPECT_EQ(SecondsSetting("PADDLE_STORE_TIMEOUT_S").value(), absl::Nanoseconds(1));
  ScopedEnv zero("PADDLE_CONNECT_TIMEOUT_S", "\t0\n");
  EXPECT_EQ(SecondsSetting("PADDLE_CONNECT_TIMEOUT_S").value(), absl::ZeroDuration());
}

TEST(SettingsTest, ChoicesIgnoreCaseAndListTheAlternatives) {
  ScopedEnv upper("PADDLE_TRANSPORT", " SHM ");
  EXPECT_EQ(ChoiceSetting("PADDLE_TRANSPORT").value(), "shm");
  ScopedEnv bad("PADDLE_ALGO", "fastest");
  const std::string message = ErrorNaming(ChoiceSetting("PADDLE_ALGO"), "PADDLE_ALGO", "fastest");
  EXPECT_TRUE(absl::StrContains(message, "ring, tree, hd")) << message;
}

TEST(SettingsTest, StringsAreTakenAsGivenAndEmptyIsUnset) {
  ScopedEnv path("PADDLE_TIMELINE", " /tmp/trace.json");
  EXPECT_EQ(StringSetting("PADDLE_TIMELINE"), " /tmp/trace.json");
  ScopedEnv blank("PADDLE_HOST_ID", "");
  EXPECT_EQ(StringSetting("PADDLE_HOST_ID"), std::nullopt);
}

TEST(SettingsTest, CheckSettingsReportsAMalformedVariable) {
  ScopedEnv bad("PADDLE_SHM_SPIN_US", "-1");
  const absl::Status status = CheckSettings();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "PADDLE_SHM_SPIN_US=\"-1\"")) << status;
}

TEST(SettingsDeathTest, AnUndeclaredNameOrTheWrongReaderAborts) {
  EXPECT_DEATH((void)IntSetting("PADDLE_NOT_DECLARED"), "PADDLE_NOT_DECLARED is not declared");
  EXPECT_DEATH((void)BoolSetting("PADDLE_TIMEOUT_S"), "PADDLE_TIMEOUT_S is declared with another");
}

// docs/configuration.md is generated from the table; a table change without the regenerated
// file fails here, with the command that fixes it.
TEST(SettingsTest, CheckedInConfigurationDocMatchesTheTable) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  ASSERT_NE(srcdir, nullptr);
  ASSERT_NE(workspace, nullptr);
  const std::string path = absl::StrCat(srcdir, "/", workspace, "/docs/configuration.md");
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == ConfigurationMarkdown())
      << "docs/configuration.md differs from the settings table in paddle/core/settings.cc; "
         "regenerate it from the workspace root with\n"
         "  bazel run //paddle/core:configuration_doc > docs/configuration.md";
}

}  // namespace
}  // namespace paddle
