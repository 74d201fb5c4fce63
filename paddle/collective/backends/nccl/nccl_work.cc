// NcclWork: completion by event query, the communicator's error, or the watchdog.
#include "paddle/collective/backends/nccl/nccl_work.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"

namespace paddle {

NcclWork::NcclWork(std::string description, uint64_t seq, int rank, int size,
                   std::shared_ptr<NcclComm> comm, cudaEvent_t end)
    : description_(std::move(description)),
      seq_(seq),
      rank_(rank),
      size_(size),
      comm_(std::move(comm)),
      end_(end) {}

NcclWork::~NcclWork() {
  // Safe while the event is still pending: CUDA releases it once it completes.
  if (end_ != nullptr) (void)cudaEventDestroy(end_);
}

bool NcclWork::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return false;
    done_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
  return true;
}

bool NcclWork::Poll() {
  if (IsCompleted()) return true;
  if (end_ == nullptr) return false;
  const cudaError_t query = cudaEventQuery(end_);
  if (query == cudaErrorNotReady) return false;
  if (query == cudaSuccess) {
    Complete(absl::OkStatus());
    return true;
  }
  (void)cudaGetLastError();
  Complete(
      ErrorContext()
          .Rank(rank_, size_)
          .Op(description_)
          .Wrap(CudaErrorToStatus(query, "cudaEventQuery(end of operation)", __FILE__, __LINE__)));
  return true;
}

absl::Status NcclWork::Wait(absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + timeout;
  absl::Duration interval = absl::Microseconds(5);
  for (;;) {
    if (Poll()) return status();
    if (comm_ != nullptr) {
      absl::Status error = comm_->AsyncError();
      if (!error.ok()) {
        // The watchdog sees the same error within milliseconds and aborts the communicator.
        Complete(
            ErrorContext()
                .Rank(rank_, size_)
                .Op(description_)
                .Wrap(Annotate(
                    error,
                    "NCCL reported an error; the communicator was aborted; create a new one")));
        return status();
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Wait() gave up after ", absl::FormatDuration(now - start), " (its timeout ",
          absl::FormatDuration(timeout), ") on ", description_, " on rank ", rank_, "/", size_,
          ", still waiting for the operation's end event on the GPU; the operation goes on and "
          "fails by its own collective timeout"));
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoMicroseconds(std::min(interval, deadline - now)),
                 [this] { return done_; });
    interval = std::min(interval * 2, absl::Milliseconds(1));
  }
}

bool NcclWork::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::Status NcclWork::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return absl::UnavailableError(absl::StrCat(description_, " still running"));
  return status_;
}

}  // namespace paddle
