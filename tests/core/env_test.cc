// Note [Environment settings]: unset or blank is "not given", a value is used exactly as given,
// and anything malformed is kInvalidArgument naming the variable, its value and what it accepts.
#include "paddle/core/env.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

constexpr char kVar[] = "PADDLE_ENV_TEST_VALUE";

// The error of `result`, checked to name the variable and `value`.
template <typename T>
std::string ErrorNaming(const absl::StatusOr<T>& result, const char* value) {
  EXPECT_FALSE(result.ok()) << value;
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(result.status().message());
  EXPECT_TRUE(absl::StrContains(message, std::string(kVar) + "=\"" + value + "\"")) << message;
  return message;
}

TEST(EnvTest, UnsetAndBlankAreNotGiven) {
  for (const char* value : {static_cast<const char*>(nullptr), "", "  \t"}) {
    ScopedEnv env(kVar, value);
    EXPECT_EQ(IntFromEnv(kVar, 0, 10).value(), std::nullopt);
    EXPECT_EQ(BoolFromEnv(kVar).value(), std::nullopt);
    EXPECT_EQ(SecondsFromEnv(kVar, /*inf_ok=*/true).value(), std::nullopt);
  }
}

TEST(EnvTest, IntegersInRange) {
  ScopedEnv env(kVar, " 42 ");
  EXPECT_EQ(IntFromEnv(kVar, 0, 42).value(), 42);
  EXPECT_EQ(IntFromEnv(kVar, -5, 100).value(), 42);
  setenv(kVar, "-7", 1);
  EXPECT_EQ(IntFromEnv(kVar, -10, 0).value(), -7);
}

TEST(EnvTest, MalformedIntegersNameTheRangeAndMeaning) {
  for (const char* value :
       {"abc", "12abc", "1.5", "nan", "-1", "11", "99999999999999999999", "0x10", "1 2"}) {
    ScopedEnv env(kVar, value);
    const std::string message =
        ErrorNaming(IntFromEnv(kVar, 0, 10, "bytes per thing; 0 means none"), value);
    EXPECT_TRUE(absl::StrContains(message,
                                  "is not an integer from 0 to 10 (bytes per thing; 0 "
                                  "means none)"))
        << message;
  }
}

TEST(EnvTest, Booleans) {
  for (const char* value : {"1", "true", "YES", "On"}) {
    ScopedEnv env(kVar, value);
    EXPECT_EQ(BoolFromEnv(kVar).value(), true) << value;
  }
  for (const char* value : {"0", "false", "No", "OFF"}) {
    ScopedEnv env(kVar, value);
    EXPECT_EQ(BoolFromEnv(kVar).value(), false) << value;
  }
  for (const char* value : {"2", "maybe", "-1", "1x"}) {
    ScopedEnv env(kVar, value);
    EXPECT_TRUE(absl::StrContains(ErrorNaming(BoolFromEnv(kVar), value), "a boolean"));
  }
}

TEST(EnvTest, Seconds) {
  ScopedEnv env(kVar, "1.5");
  EXPECT_EQ(SecondsFromEnv(kVar, false).value(), absl::Milliseconds(1500));
  setenv(kVar, "0", 1);
  EXPECT_EQ(SecondsFromEnv(kVar, false).value(), absl::ZeroDuration());
  setenv(kVar, "2e-3", 1);
  EXPECT_EQ(SecondsFromEnv(kVar, false).value(), absl::Milliseconds(2));
  setenv(kVar, "inf", 1);
  EXPECT_EQ(SecondsFromEnv(kVar, true).value(), absl::InfiniteDuration());
  // A positive value never rounds to 0, which callers read as "off" or "no limit".
  setenv(kVar, "1e-20", 1);
  EXPECT_GT(SecondsFromEnv(kVar, false).value(), absl::ZeroDuration());
}

TEST(EnvTest, MalformedSecondsAreErrors) {
  for (const char* value : {"nan", "NaN", "-nan", "-1", "-0.5", "-inf", "30s", "soon"}) {
    ScopedEnv env(kVar, value);
    EXPECT_TRUE(absl::StrContains(ErrorNaming(SecondsFromEnv(kVar, true), value),
                                  "a number of seconds >= 0 or inf"));
  }
  // Without inf_ok, neither "inf" nor a value too large for a finite duration is accepted.
  for (const char* value : {"inf", "1e300"}) {
    ScopedEnv env(kVar, value);
    EXPECT_TRUE(absl::StrContains(ErrorNaming(SecondsFromEnv(kVar, false, "the interval"), value),
                                  "a finite number of seconds >= 0 (the interval)"));
  }
}

}  // namespace
}  // namespace paddle
