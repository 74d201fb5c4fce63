#include "paddle/core/deadline.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(DeadlineTest, NeverDoesNotExpire) {
  Deadline d = Deadline::Never();
  EXPECT_TRUE(d.IsNever());
  EXPECT_FALSE(d.Expired());
  EXPECT_EQ(d.Remaining(), absl::InfiniteDuration());
  EXPECT_EQ(d.PollTimeoutMillis(), -1);
  EXPECT_EQ(d.WallClockDeadline(), absl::InfiniteFuture());
}

TEST(DeadlineTest, ZeroAndNegativeTimeoutsAreAlreadyExpired) {
  EXPECT_TRUE(Deadline::After(absl::ZeroDuration()).Expired());
  Deadline d = Deadline::After(absl::Seconds(-1));
  EXPECT_TRUE(d.Expired());
  EXPECT_EQ(d.Remaining(), absl::ZeroDuration());
  EXPECT_EQ(d.PollTimeoutMillis(), 0);
}

TEST(DeadlineTest, RemainingShrinksAndPollRoundsUp) {
  Deadline d = Deadline::After(absl::Hours(1));
  EXPECT_FALSE(d.Expired());
  EXPECT_LE(d.Remaining(), absl::Hours(1));
  EXPECT_GT(d.Remaining(), absl::Minutes(59));
  EXPECT_GE(d.PollTimeoutMillis(), 3599000);
  // A sub-millisecond remainder must not become a zero-millisecond (busy) poll.
  EXPECT_EQ(Deadline::After(absl::Microseconds(400000)).PollTimeoutMillis() > 0, true);
  EXPECT_EQ(Deadline::After(absl::Hours(24 * 365 * 100)).PollTimeoutMillis(), INT32_MAX);
}

TEST(DeadlineTest, ExpiresAfterItsTimeout) {
  Deadline d = Deadline::After(absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_TRUE(d.Expired());
  EXPECT_GE(d.Elapsed(), absl::Milliseconds(20));
  absl::Status s = d.TimeoutError("Get(key) on FileStore /tmp/x");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("Get(key) on FileStore /tmp/x timed out after"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("(timeout 0.02s)"), std::string::npos) << s;
}

TEST(DefaultTimeoutTest, EnvironmentOverrides) {
  unsetenv("PADDLE_TIMEOUT_S");
  EXPECT_EQ(DefaultTimeout(TimeoutKind::kCollective), absl::Seconds(300));
  EXPECT_EQ(DefaultTimeout(TimeoutKind::kConnect), absl::Seconds(60));
  setenv("PADDLE_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(DefaultTimeout(TimeoutKind::kCollective), absl::Milliseconds(2500));
  EXPECT_NE(TimeoutHint(TimeoutKind::kCollective).find("PADDLE_TIMEOUT_S (now 2.5s)"),
            std::string::npos);
  setenv("PADDLE_TIMEOUT_S", "0", 1);
  EXPECT_EQ(DefaultTimeout(TimeoutKind::kCollective), absl::InfiniteDuration());
  setenv("PADDLE_TIMEOUT_S", "inf", 1);
  EXPECT_EQ(DefaultTimeout(TimeoutKind::kCollective), absl::InfiniteDuration());
  // Below the clock's resolution is still a (tiny) limit, not 0's "no limit".
  setenv("PADDLE_TIMEOUT_S", "1e-15", 1);
  EXPECT_LT(DefaultTimeout(TimeoutKind::kCollective), absl::Microseconds(1));
  unsetenv("PADDLE_TIMEOUT_S");
  EXPECT_TRUE(CheckTimeoutEnvironment().ok());
}

// Note [Environment settings]: NaN would be an infinite wait and the others silently the default.
TEST(DefaultTimeoutTest, MalformedValuesAreErrorsNamingTheVariable) {
  for (const char* value : {"soon", "nan", "-1", "30s", "-inf"}) {
    setenv("PADDLE_STORE_TIMEOUT_S", value, 1);
    absl::StatusOr<absl::Duration> timeout = TimeoutFromEnv(TimeoutKind::kStore);
    ASSERT_FALSE(timeout.ok()) << value;
    EXPECT_EQ(timeout.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string needle = std::string("PADDLE_STORE_TIMEOUT_S=\"") + value + "\"";
    EXPECT_NE(timeout.status().message().find(needle), std::string::npos) << timeout.status();
    EXPECT_NE(timeout.status().message().find("0 or inf for no limit"), std::string::npos);
    EXPECT_EQ(CheckTimeoutEnvironment(), timeout.status());
  }
  unsetenv("PADDLE_STORE_TIMEOUT_S");
}

TEST(DefaultTimeoutDeathTest, MalformedValueAbortsNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("PADDLE_TIMEOUT_S", "nan", 1);
  EXPECT_DEATH(DefaultTimeout(TimeoutKind::kCollective), "PADDLE_TIMEOUT_S=\"nan\"");
  unsetenv("PADDLE_TIMEOUT_S");
}

// A wait whose timeout came from an option, not the environment, must not quote the
// environment's value as if it had applied.
TEST(DefaultTimeoutTest, HintNamesTheTimeoutInUse) {
  unsetenv("PADDLE_CONNECT_TIMEOUT_S");
  EXPECT_EQ(TimeoutHint(TimeoutKind::kConnect, absl::Seconds(60)),
            TimeoutHint(TimeoutKind::kConnect));
  const std::string hint = TimeoutHint(TimeoutKind::kConnect, absl::Seconds(120));
  EXPECT_NE(hint.find("this wait's was 120s, set by the caller"), std::string::npos) << hint;
  EXPECT_NE(hint.find("PADDLE_CONNECT_TIMEOUT_S gives 60s"), std::string::npos) << hint;
  EXPECT_EQ(hint.find("(now "), std::string::npos) << hint;
  EXPECT_NE(TimeoutHint(TimeoutKind::kStore, absl::InfiniteDuration()).find("was no limit"),
            std::string::npos);
  EXPECT_EQ(TimeoutEnvVar(TimeoutKind::kStore), "PADDLE_STORE_TIMEOUT_S");
}

}  // namespace
}  // namespace paddle
