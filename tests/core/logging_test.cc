#include "paddle/core/logging.h"

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

absl::Mutex g_mu;
std::vector<std::string>* g_lines = new std::vector<std::string>();

void CaptureSink(absl::string_view line) {
  absl::MutexLock lock(&g_mu);
  g_lines->emplace_back(line);
}

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = ActiveLogConfig();
    SetLogSink(&CaptureSink);
    absl::MutexLock lock(&g_mu);
    g_lines->clear();
  }
  void TearDown() override {
    SetLogSink(nullptr);
    SetLogConfig(saved_);
  }
  std::vector<std::string> Lines() {
    absl::MutexLock lock(&g_mu);
    return *g_lines;
  }
  LogConfig saved_;
};

TEST_F(LoggingTest, ParsesLevelsAndSubsystems) {
  LogConfig c;
  ASSERT_TRUE(ParseLogConfig("debug", "NET,store", &c).ok());
  EXPECT_EQ(c.level, LogLevel::kDebug);
  EXPECT_EQ(c.subsys_mask, static_cast<uint32_t>(kLogNet | kLogStore));
  ASSERT_TRUE(ParseLogConfig("", "^NET", &c).ok());
  EXPECT_EQ(c.level, LogLevel::kWarn);
  EXPECT_EQ(c.subsys_mask & kLogNet, 0u);
  EXPECT_NE(c.subsys_mask & kLogColl, 0u);
  ASSERT_TRUE(ParseLogConfig("TRACE", "", &c).ok());
  EXPECT_EQ(c.subsys_mask, static_cast<uint32_t>(kLogAll));
}

TEST_F(LoggingTest, BadSettingsNameTheWord) {
  LogConfig c;
  absl::Status s = ParseLogConfig("LOUD", "", &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("PADDLE_LOG_LEVEL=LOUD"), std::string::npos) << s;
  s = ParseLogConfig("INFO", "NET,DISK", &c);
  EXPECT_NE(s.message().find("'DISK'"), std::string::npos) << s;
}

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(LoggingTest, ConfigFromEnvNamesAMalformedVariableAndWhatItAccepts) {
  {
    ScopedEnv level("PADDLE_LOG_LEVEL", "loud");
    absl::StatusOr<LogConfig> c = LogConfigFromEnv();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("PADDLE_LOG_LEVEL=\"loud\" is not one of error, warn, "
                                        "warning, info, debug, trace"),
              std::string::npos)
        << c.status();
  }
  {
    ScopedEnv subsys("PADDLE_LOG_SUBSYS", "NET,DISK");
    absl::StatusOr<LogConfig> c = LogConfigFromEnv();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("PADDLE_LOG_SUBSYS=NET,DISK: unknown subsystem 'DISK'"),
              std::string::npos)
        << c.status();
  }
  ScopedEnv level("PADDLE_LOG_LEVEL", " Debug ");
  ScopedEnv subsys("PADDLE_LOG_SUBSYS", "coll");
  absl::StatusOr<LogConfig> c = LogConfigFromEnv();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->level, LogLevel::kDebug);
  EXPECT_EQ(c->subsys_mask, static_cast<uint32_t>(kLogColl));
}

// A malformed level is an error, not a warning and the default: the first log statement, which
// cannot return a Status, ends the process naming the variable and its choices.
TEST_F(LoggingTest, AMalformedLevelEndsTheProcessAtTheFirstLogStatement) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  SetLogSink(nullptr);  // the message goes to stderr
  EXPECT_DEATH(
      {
        setenv("PADDLE_LOG_LEVEL", "loud", 1);
        internal::g_log_config.store(internal::kLogConfigUnset);
        PADDLE_LOG(INFO, INIT) << "never written";
      },
      "INIT logging.cc:[0-9]+\\] PADDLE_LOG_LEVEL=\"loud\" is not one of error, warn, warning, "
      "info, debug, trace \\(the least severe log lines written to stderr.*set it to one");
}

TEST_F(LoggingTest, DisabledStatementsDoNotEvaluateOperands) {
  SetLogConfig({LogLevel::kWarn, kLogAll});
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  PADDLE_LOG(INFO, NET) << count();
  PADDLE_LOG(DEBUG, COLL) << count();
  EXPECT_EQ(evaluated, 0);
  EXPECT_TRUE(Lines().empty());
  PADDLE_LOG(WARN, NET) << count();
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(Lines().size(), 1u);
}

TEST_F(LoggingTest, SubsystemMaskFilters) {
  SetLogConfig({LogLevel::kInfo, kLogStore});
  PADDLE_LOG(INFO, NET) << "net line";
  PADDLE_LOG(INFO, STORE) << "store line";
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("store line"), std::string::npos);
  EXPECT_NE(lines[0].find(" STORE "), std::string::npos);
}

TEST_F(LoggingTest, PrefixCarriesHostPidAndRank) {
  SetLogConfig({LogLevel::kInfo, kLogAll});
  PADDLE_LOG(INFO, INIT) << "no rank yet";
  {
    ScopedLogRank rank(3, 8);
    PADDLE_LOG(INFO, INIT) << "with rank";
    EXPECT_NE(LogPrefix().find("[rank 3/8]"), std::string::npos);
  }
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  const std::string pid = ":" + std::to_string(getpid());
  EXPECT_NE(lines[0].find(pid), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("[rank"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(pid + " [rank 3/8]"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("logging_test.cc:"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].back(), '\n');
}

TEST_F(LoggingTest, ThreadsLogWholeLinesWithTheirOwnRank) {
  SetLogConfig({LogLevel::kInfo, kLogAll});
  constexpr int kThreads = 8, kLines = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      ScopedLogRank rank(t, kThreads);
      for (int i = 0; i < kLines; ++i) PADDLE_LOG(INFO, COLL) << "thread " << t << " line " << i;
    });
  }
  for (auto& th : threads) th.join();
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const std::string& line : lines) {
    const size_t at = line.find("thread ");
    ASSERT_NE(at, std::string::npos);
    const int t = std::stoi(line.substr(at + 7));
    EXPECT_NE(line.find("[rank " + std::to_string(t) + "/8]"), std::string::npos) << line;
  }
}

TEST(LoggingDeathTest, CheckAbortsWithMessage) {
  EXPECT_DEATH(PADDLE_CHECK(1 + 1 == 3) << "arithmetic is broken",
               "Check failed: 1 \\+ 1 == 3 "
               "arithmetic is broken");
  EXPECT_DEATH(PADDLE_CHECK_OK(absl::InternalError("boom")), "boom");
}

}  // namespace
}  // namespace paddle
