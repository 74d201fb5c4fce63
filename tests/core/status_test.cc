#include "paddle/core/status.h"

#include <string>

#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(ErrorContextTest, WrapKeepsCodeAndAppendsEveryField) {
  absl::Status s = ErrorContext()
                       .Rank(1, 4)
                       .Peer(2, "10.0.0.2:29500")
                       .Op("allreduce", 8)
                       .Bytes(4096)
                       .Waited(absl::Milliseconds(1500), absl::Seconds(30))
                       .Hint("raise PADDLE_TIMEOUT_S")
                       .Wrap(absl::DeadlineExceededError("no data from peer"));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "no data from peer [rank 1/4, peer 2 (10.0.0.2:29500), op allreduce #8, 4096 bytes, "
            "waited 1.5s of 30s]; raise PADDLE_TIMEOUT_S");
}

TEST(ErrorContextTest, UnsetFieldsAreLeftOut) {
  absl::Status s = ErrorContext().Op("barrier").Wrap(absl::UnavailableError("peer gone"));
  EXPECT_EQ(s.message(), "peer gone [op barrier]");
  EXPECT_EQ(ErrorContext().Wrap(absl::AbortedError("x")).message(), "x");
}

TEST(ErrorContextTest, OkStaysOk) {
  EXPECT_TRUE(ErrorContext().Rank(0, 1).Wrap(absl::OkStatus()).ok());
  EXPECT_TRUE(Annotate(absl::OkStatus(), "anything").ok());
}

TEST(ErrorContextTest, InfiniteTimeoutIsNamed) {
  absl::Status s = ErrorContext()
                       .Waited(absl::Seconds(2), absl::InfiniteDuration())
                       .Wrap(absl::InternalError("stuck"));
  EXPECT_EQ(s.message(), "stuck [waited 2s of no limit]");
}

TEST(AnnotateTest, PrefixesAndKeepsCode) {
  absl::Status s = Annotate(absl::UnavailableError("connection refused"), "connecting to h:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "connecting to h:1: connection refused");
}

// Note [Ranks disagree]: the mark survives the context added on the way up, which the Python
// boundary needs to raise DistError rather than ValueError.
TEST(RanksDisagreeTest, MarkSurvivesWrapAndAnnotate) {
  const absl::Status plain = absl::InvalidArgumentError("count is -1");
  EXPECT_FALSE(RanksDisagree(plain));
  const absl::Status marked = MarkRanksDisagree(absl::InvalidArgumentError("ranks differ"));
  EXPECT_TRUE(RanksDisagree(marked));
  EXPECT_EQ(marked.code(), absl::StatusCode::kInvalidArgument);
  const absl::Status wrapped = Annotate(ErrorContext().Rank(1, 2).Wrap(marked), "broadcast #1");
  EXPECT_TRUE(RanksDisagree(wrapped));
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrapped.message(), "broadcast #1: ranks differ [rank 1/2]");
  EXPECT_FALSE(RanksDisagree(Annotate(plain, "allreduce #1")));
  EXPECT_TRUE(MarkRanksDisagree(absl::OkStatus()).ok());
}

absl::Status FailIfNegative(int x) {
  if (x < 0) return absl::InvalidArgumentError("negative");
  return absl::OkStatus();
}

absl::StatusOr<int> Twice(int x) {
  RETURN_IF_ERROR(FailIfNegative(x));
  return 2 * x;
}

absl::StatusOr<int> Quadruple(int x) {
  ASSIGN_OR_RETURN(int y, Twice(x));
  ASSIGN_OR_RETURN(y, Twice(y));
  return y;
}

TEST(MacrosTest, PropagateErrorsAndValues) {
  EXPECT_EQ(*Quadruple(3), 12);
  absl::StatusOr<int> bad = Quadruple(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paddle
