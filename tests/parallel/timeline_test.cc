// Timeline without a communicator: the spans land in a valid Chrome trace, and a path that
// cannot be written is an error naming it (the multi-rank gather runs in
// tests/examples/fashion_mnist_ddp_test.sh).
#include "paddle/parallel/timeline.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(TimelineTest, WritesSpansAsChromeTrace) {
  Timeline timeline(TempPath("trace.json"), /*rank=*/3);
  absl::Time t0 = absl::FromUnixMicros(1000000);
  timeline.Span("forward", Timeline::Lane::kCompute, t0, t0 + absl::Microseconds(250));
  timeline.Span("allreduce bucket 0", Timeline::Lane::kAllreduce, t0, t0 + absl::Milliseconds(2),
                4096);
  EXPECT_EQ(timeline.num_spans(), 2);
  ASSERT_TRUE(timeline.Write(nullptr).ok());
  std::ifstream in(timeline.path());
  std::stringstream text;
  text << in.rdbuf();
  const std::string trace = text.str();
  EXPECT_THAT(trace, ::testing::StartsWith("{\"traceEvents\": ["));
  EXPECT_THAT(trace, ::testing::HasSubstr(R"("name": "rank 3")"));
  EXPECT_THAT(
      trace,
      ::testing::HasSubstr(
          R"({"name": "forward", "ph": "X", "pid": 3, "tid": 0, "ts": 1000000, "dur": 250})"));
  EXPECT_THAT(trace, ::testing::HasSubstr(
                         R"("tid": 1, "ts": 1000000, "dur": 2000, "args": {"bytes": 4096}})"));
}

TEST(TimelineTest, UnwritablePathIsNamed) {
  Timeline timeline("/nonexistent-dir/trace.json", 0);
  absl::Status s = timeline.Write(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'/nonexistent-dir/trace.json'"));
}

}  // namespace
}  // namespace paddle
