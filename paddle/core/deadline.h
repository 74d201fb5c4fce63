// Deadlines and the project's default timeouts.
//
// Every blocking call in Paddle Collective takes a `Deadline` (or a timeout it turns into one) and
// none ignores it. Deadlines run on the monotonic clock, so a wall-clock jump never fires or
// stalls one. Note [Default timeouts]: the defaults live here and only here, each with the
// environment variable that overrides it, so an error message can name the knob to turn.
#ifndef PADDLE_CORE_DEADLINE_H_
#define PADDLE_CORE_DEADLINE_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace paddle {

// A point on the monotonic clock by which something must finish, remembering when it started.
class Deadline {
 public:
  // `timeout` of absl::InfiniteDuration() never expires; a negative one has already expired.
  static Deadline After(absl::Duration timeout);
  static Deadline Never() { return After(absl::InfiniteDuration()); }

  bool IsNever() const { return timeout_ == absl::InfiniteDuration(); }
  bool Expired() const;
  // Time left, never negative; InfiniteDuration() for Never().
  absl::Duration Remaining() const;
  absl::Duration Elapsed() const;
  absl::Duration timeout() const { return timeout_; }

  // Remaining time for poll()/epoll_wait(): milliseconds rounded up, capped at INT_MAX; -1 for
  // Never(). Rounding up keeps a 0.4 ms remainder from turning into a busy loop of 0 ms waits.
  int PollTimeoutMillis() const;
  // For condition variables and absl::Mutex::AwaitWithDeadline (wall clock, from now).
  absl::Time WallClockDeadline() const;

  // kDeadlineExceeded: "<what> timed out after 1.5s (timeout 1.5s)".
  absl::Status TimeoutError(absl::string_view what) const;

 private:
  using Clock = std::chrono::steady_clock;
  Deadline(Clock::time_point start, absl::Duration timeout) : start_(start), timeout_(timeout) {}

  Clock::time_point start_;
  absl::Duration timeout_;
};

// What a timeout is for; each kind has its own default and environment variable.
enum class TimeoutKind {
  kCollective,  // one collective operation: PADDLE_TIMEOUT_S, default 300 s
  kStore,       // one store operation (get/wait): PADDLE_STORE_TIMEOUT_S, default 300 s
  kConnect,     // connecting to a store or peer, retries included: PADDLE_CONNECT_TIMEOUT_S, 60 s
};

// The timeout for `kind`: its environment variable when set, as a number of seconds (0 or "inf"
// for no limit), else the built-in default. Read at each call so tests can override it. A
// malformed value (not a number, NaN, negative: Note [Environment settings] in env.h) is
// kInvalidArgument naming the variable.
absl::StatusOr<absl::Duration> TimeoutFromEnv(TimeoutKind kind);

// TimeoutFromEnv for all kinds. Entry points (Rendezvous) call it first so that a malformed
// variable reaches the user as an error rather than as the abort of DefaultTimeout.
absl::Status CheckTimeoutEnvironment();

// TimeoutFromEnv for the many places that cannot return a Status (option defaults); a malformed
// variable aborts with TimeoutFromEnv's message instead of silently becoming the default.
absl::Duration DefaultTimeout(TimeoutKind kind);

// The environment variable that overrides `kind`, for error messages ("raise PADDLE_TIMEOUT_S").
absl::string_view TimeoutEnvVar(TimeoutKind kind);

// "raise PADDLE_TIMEOUT_S (now 300s) if the job is merely slow"
std::string TimeoutHint(TimeoutKind kind);
// The same for a wait that used `in_use`: when that is not what the environment gives (an option
// or argument set it), the hint says so instead of quoting a default that did not apply:
// "raise the timeout (this wait's was 120s, set by the caller; PADDLE_CONNECT_TIMEOUT_S gives
// 60s) if the job is merely slow".
std::string TimeoutHint(TimeoutKind kind, absl::Duration in_use);

}  // namespace paddle

#endif  // PADDLE_CORE_DEADLINE_H_
