// GlooWork: completion, waiting with a timeout, and the message of a Wait that gives up.
#include "paddle/collective/backends/gloo/gloo_work.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/deadline.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

GlooWork::GlooWork(std::string description, uint64_t seq, int rank, int size,
                   absl::Duration timeout)
    : description_(std::move(description)),
      seq_(seq),
      rank_(rank),
      size_(size),
      timeout_(timeout) {}

absl::Status GlooWork::Wait(absl::Duration timeout) {
  const Deadline deadline = Deadline::After(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.IsNever()) {
    cv_.wait(lock, [this] { return done_; });
  } else {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(deadline.Remaining()), [this] { return done_; });
  }
  if (done_) return status_;
  return ErrorContext()
      .Rank(rank_, size_)
      .Op(description_)
      .Waited(deadline.Elapsed(), timeout)
      .Hint(absl::StrCat("the operation goes on and fails by its own timeout (",
                         absl::FormatDuration(timeout_), ") if it never finishes"))
      .Wrap(absl::DeadlineExceededError("Work::Wait gave up before the operation finished"));
}

bool GlooWork::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status GlooWork::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? status_ : absl::UnavailableError(absl::StrCat(description_, " still running"));
}

void GlooWork::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PADDLE_CHECK(!done_) << description_ << " completed twice";
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace paddle
