// Errors in Paddle Collective: absl::Status / absl::StatusOr<T> everywhere, plus the context a
// user needs to act on one. An error a user can meet names the rank and world size, the peer and
// its address, the operation and its sequence number, the bytes involved, how long was waited
// against which timeout, and what to change. `ErrorContext` collects those fields and stamps them
// onto a Status without changing its canonical code:
//
//   return ErrorContext().Rank(1, 4).Peer(2, "10.0.0.2:29500").Op("allreduce", 8)
//       .Bytes(4096).Waited(elapsed, timeout).Hint("raise PADDLE_TIMEOUT_S")
//       .Wrap(absl::DeadlineExceededError("no data from peer"));
//
// yields "DEADLINE_EXCEEDED: no data from peer [rank 1/4, peer 2 (10.0.0.2:29500),
// op allreduce #8, 4096 bytes, waited 30.0s of 30.0s]; raise PADDLE_TIMEOUT_S".
#ifndef PADDLE_CORE_STATUS_H_
#define PADDLE_CORE_STATUS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace paddle {

// Fields describing where an error happened. Unset fields are left out of the message.
class ErrorContext {
 public:
  ErrorContext& Rank(int rank, int world_size);
  ErrorContext& Peer(int peer_rank, absl::string_view address = "");
  ErrorContext& Op(absl::string_view op, int64_t seq = -1);
  ErrorContext& Bytes(int64_t bytes);
  ErrorContext& Waited(absl::Duration waited, absl::Duration timeout);
  ErrorContext& Hint(absl::string_view hint);

  // "rank 1/4, peer 2 (addr), op allreduce #8, 4096 bytes, waited 1.5s of 30s"; empty if unset.
  std::string Describe() const;

  // Returns `status` with this context appended to its message; OK stays OK, the code is kept.
  absl::Status Wrap(const absl::Status& status) const;

 private:
  int rank_ = -1;
  int world_size_ = -1;
  int peer_ = -1;
  std::string peer_address_;
  std::string op_;
  int64_t seq_ = -1;
  int64_t bytes_ = -1;
  absl::optional<absl::Duration> waited_;
  absl::Duration timeout_;
  std::string hint_;
};

// Returns `status` with "what: " prefixed to its message (code kept; OK stays OK). For adding the
// caller's view of a failure: Annotate(s, "connecting to the TCPStore at host:port").
// Wrap and Annotate keep the status's payloads (MarkRanksDisagree's among them).
absl::Status Annotate(const absl::Status& status, absl::string_view what);

// Note [Ranks disagree]: when the ranks' calls do not match each other (found by the agreement
// check, the ring stamps or PADDLE_DEBUG_CHECKS), the error keeps kInvalidArgument, as the calls
// are invalid together, and carries this mark: no one rank's argument is at fault, so the Python
// boundary raises DistError for it, not the ValueError of a rank's own bad argument
// (Note [Status to exception] in python/bindings/common.h).
absl::Status MarkRanksDisagree(absl::Status status);
bool RanksDisagree(const absl::Status& status);

}  // namespace paddle

#define PADDLE_STATUS_CONCAT_INNER_(a, b) a##b
#define PADDLE_STATUS_CONCAT_(a, b) PADDLE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status paddle_status_ = (expr);          \
    if (!paddle_status_.ok()) return paddle_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns from an absl::StatusOr<T>, or returns its
// error from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PADDLE_ASSIGN_OR_RETURN_IMPL_(PADDLE_STATUS_CONCAT_(paddle_statusor_, __LINE__), lhs, expr)

// `tmp` is a fresh identifier and `lhs` may be a declaration: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define PADDLE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // PADDLE_CORE_STATUS_H_
