// GlooWork: the Work handle of one operation of the Gloo backend.
//
// The communicator's worker thread completes it once (or Enqueue does, for a call it rejects or
// a poisoned communicator); any number of threads may wait on it. Wait(timeout) gives up at its
// timeout without touching the operation, which still ends by its own collective timeout.
#ifndef PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_WORK_H_
#define PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_WORK_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/work.h"

namespace paddle {

class GlooWork : public Work {
 public:
  // `rank`/`size` and the operation's own `timeout` are for the message of a Wait that gives up.
  GlooWork(std::string description, uint64_t seq, int rank, int size, absl::Duration timeout);

  absl::Status Wait(absl::Duration timeout) override;
  bool IsCompleted() const override;
  absl::Status status() const override;
  std::string Describe() const override { return description_; }
  uint64_t seq() const override { return seq_; }

  // Sets the final status and wakes the waiters; a second call is a bug (CHECK).
  void Complete(absl::Status status);

 private:
  const std::string description_;
  const uint64_t seq_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  // A std::mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;    // guarded by mu_
  absl::Status status_;  // guarded by mu_
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_WORK_H_
