#include "paddle/core/deadline.h"

#include <climits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {

Deadline Deadline::After(absl::Duration timeout) { return Deadline(Clock::now(), timeout); }

absl::Duration Deadline::Elapsed() const { return absl::FromChrono(Clock::now() - start_); }

bool Deadline::Expired() const { return !IsNever() && Elapsed() >= timeout_; }

absl::Duration Deadline::Remaining() const {
  if (IsNever()) return absl::InfiniteDuration();
  absl::Duration left = timeout_ - Elapsed();
  return left > absl::ZeroDuration() ? left : absl::ZeroDuration();
}

int Deadline::PollTimeoutMillis() const {
  if (IsNever()) return -1;
  absl::Duration left = Remaining();
  int64_t ms = absl::ToInt64Milliseconds(left);
  if (absl::Milliseconds(ms) < left) ++ms;  // round up
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

absl::Time Deadline::WallClockDeadline() const {
  if (IsNever()) return absl::InfiniteFuture();
  return absl::Now() + Remaining();
}

absl::Status Deadline::TimeoutError(absl::string_view what) const {
  return absl::DeadlineExceededError(absl::StrFormat("%s timed out after %.3gs (timeout %.3gs)",
                                                     what, absl::ToDoubleSeconds(Elapsed()),
                                                     absl::ToDoubleSeconds(timeout_)));
}

absl::string_view TimeoutEnvVar(TimeoutKind kind) {
  switch (kind) {
    case TimeoutKind::kCollective:
      return "PADDLE_TIMEOUT_S";
    case TimeoutKind::kStore:
      return "PADDLE_STORE_TIMEOUT_S";
    case TimeoutKind::kConnect:
      return "PADDLE_CONNECT_TIMEOUT_S";
  }
  return "";
}

namespace {

absl::Duration BuiltinTimeout(TimeoutKind kind) {
  switch (kind) {
    case TimeoutKind::kCollective:
    case TimeoutKind::kStore:
      return absl::Seconds(300);
    case TimeoutKind::kConnect:
      return absl::Seconds(60);
  }
  return absl::Seconds(300);
}

}  // namespace

absl::StatusOr<absl::Duration> TimeoutFromEnv(TimeoutKind kind) {
  absl::StatusOr<std::optional<absl::Duration>> value = SecondsSetting(TimeoutEnvVar(kind));
  if (!value.ok()) return value.status();
  if (!value->has_value()) return BuiltinTimeout(kind);
  return **value == absl::ZeroDuration() ? absl::InfiniteDuration() : **value;
}

absl::Status CheckTimeoutEnvironment() {
  for (TimeoutKind kind : {TimeoutKind::kCollective, TimeoutKind::kStore, TimeoutKind::kConnect}) {
    absl::StatusOr<absl::Duration> timeout = TimeoutFromEnv(kind);
    if (!timeout.ok()) return timeout.status();
  }
  return absl::OkStatus();
}

absl::Duration DefaultTimeout(TimeoutKind kind) {
  absl::StatusOr<absl::Duration> timeout = TimeoutFromEnv(kind);
  PADDLE_CHECK(timeout.ok()) << timeout.status().message();
  return *timeout;
}

namespace {

std::string DurationText(absl::Duration d) {
  return d == absl::InfiniteDuration() ? std::string("no limit")
                                       : absl::StrFormat("%gs", absl::ToDoubleSeconds(d));
}

}  // namespace

std::string TimeoutHint(TimeoutKind kind) {
  return absl::StrCat("raise ", TimeoutEnvVar(kind), " (now ", DurationText(DefaultTimeout(kind)),
                      ") if the job is merely slow");
}

std::string TimeoutHint(TimeoutKind kind, absl::Duration in_use) {
  const absl::Duration from_env = DefaultTimeout(kind);
  if (in_use == from_env) return TimeoutHint(kind);
  return absl::StrCat("raise the timeout (this wait's was ", DurationText(in_use),
                      ", set by the caller; ", TimeoutEnvVar(kind), " gives ",
                      DurationText(from_env), ") if the job is merely slow");
}

}  // namespace paddle
