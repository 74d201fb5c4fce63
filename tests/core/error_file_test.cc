// RecordError (error_file.h): the first cause of a process lands in PADDLE_ERROR_FILE with the
// time and rank; later ones do not; without the setting nothing is written.
#include "paddle/core/error_file.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ErrorFileTest, TheFirstCauseWithTimeAndRankOnly) {
  const std::string path = absl::StrCat(testing::TempDir(), "/error_3");
  {
    ScopedEnv unset("PADDLE_ERROR_FILE", nullptr);
    RecordError(absl::InternalError("not recorded: no file set"), 3);
  }
  EXPECT_TRUE(Read(path).empty());
  ScopedEnv env("PADDLE_ERROR_FILE", path.c_str());
  const int64_t before = absl::GetCurrentTimeNanos();
  RecordError(absl::ResourceExhaustedError("writing ckpt: No space left on device"), 3);
  RecordError(absl::UnavailableError("a later one, caused by the first"), 3);
  const std::string text = Read(path);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_GE(lines.size(), 2u) << text;
  std::vector<std::string> head = absl::StrSplit(lines[0], ' ');
  ASSERT_EQ(head.size(), 2u) << text;
  int64_t when = 0;
  ASSERT_TRUE(absl::SimpleAtoi(head[0], &when)) << text;
  EXPECT_GE(when, before);
  EXPECT_LE(when, absl::GetCurrentTimeNanos());
  EXPECT_EQ(head[1], "3");
  EXPECT_EQ(lines[1], "RESOURCE_EXHAUSTED: writing ckpt: No space left on device");
  EXPECT_EQ(text.find("a later one"), std::string::npos) << text;
}

}  // namespace
}  // namespace paddle
