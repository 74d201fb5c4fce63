// TcpOp completion and TcpRequest::Wait; see tcp_request.h.
#include "paddle/collective/transport/tcp/tcp_request.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "paddle/collective/transport/tcp/tcp_progress.h"
#include "paddle/core/status.h"

namespace paddle {

absl::Status CopyStatus(const absl::Status& status) {
  return status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
}

TcpOp::TcpOp(Kind kind, const void* data, size_t bytes, uint64_t tag, int64_t seq)
    : kind(kind),
      data(static_cast<char*>(const_cast<void*>(data))),
      bytes(bytes),
      tag(tag),
      seq(seq),
      header{} {
  if (kind == Kind::kSend) tcp_wire::EncodeMessageHeader({tag, bytes}, header);
}

void TcpOp::Complete(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (completed_.load(std::memory_order_relaxed)) return;
  status_ = CopyStatus(status);
  completed_.store(true, std::memory_order_release);
  if (sleepers_ > 0) cv_.notify_all();
}

void TcpOp::Fail(const absl::Status& cause, const TcpLinkInfo& link) {
  Complete(Annotate(cause, Describe(link)));
}

std::string TcpOp::Describe(const TcpLinkInfo& link) const {
  return absl::StrCat(kind == Kind::kSend ? "send #" : "recv #", seq, " (tag ", tag, ", ", bytes,
                      " bytes) ", kind == Kind::kSend ? "to" : "from", " peer ", link.peer, " (",
                      link.peer_address, ")");
}

bool TcpOp::Await(const Deadline& deadline, absl::Duration spin, absl::Status* status) {
  if (spin > absl::ZeroDuration() && !IsCompleted()) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point end = Clock::now() + absl::ToChronoNanoseconds(spin);
    while (!IsCompleted() && Clock::now() < end) {
      for (int i = 0; i < 32 && !IsCompleted(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [this] { return completed_.load(std::memory_order_relaxed); };
  ++sleepers_;
  bool completed = true;
  if (deadline.IsNever()) {
    cv_.wait(lock, done);
  } else {
    // A remaining time beyond a year would overflow time_point arithmetic; it never matters.
    absl::Duration left = std::min(deadline.Remaining(), absl::Hours(24 * 365));
    completed = cv_.wait_until(
        lock, std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(left), done);
  }
  --sleepers_;
  if (completed) *status = CopyStatus(status_);
  return completed;
}

absl::Status TcpRequest::Wait(const Deadline& deadline) {
  absl::Status status;
  if (progress_ != nullptr) {
    // Note [Waiter drives]: drive the transport, or, while another thread does, sleep on this op
    // a little (that thread completes it if its data comes) and try again.
    while (!op_->IsCompleted() && !deadline.Expired()) {
      if (progress_->Drive(*op_, deadline)) break;
      const absl::Duration nap = deadline.IsNever()
                                     ? TcpProgress::kRetry
                                     : std::min(deadline.Remaining(), TcpProgress::kRetry);
      if (op_->Await(Deadline::After(nap), absl::ZeroDuration(), &status)) return status;
    }
  }
  if (op_->Await(deadline, spin_, &status)) return status;
  const TcpLinkInfo& link = *link_;
  uint64_t progress = op_->progress.load(std::memory_order_relaxed);
  std::string what =
      op_->kind == TcpOp::Kind::kSend
          ? absl::StrCat(progress, " of ", op_->bytes + tcp_wire::kMessageHeaderBytes,
                         " header and payload bytes written so far")
          : absl::StrCat(progress, " of ", op_->bytes, " payload bytes received so far");
  return ErrorContext()
      .Rank(link.rank, link.world_size)
      .Peer(link.peer, link.peer_address)
      .Op(op_->kind == TcpOp::Kind::kSend ? "send" : "recv", op_->seq)
      .Bytes(static_cast<int64_t>(op_->bytes))
      .Waited(deadline.Elapsed(), deadline.timeout())
      .Hint(op_->kind == TcpOp::Kind::kSend
                ? "the peer is not receiving; the request stays pending: wait again or Abort()"
                : "the peer has not sent it yet; the request stays pending: wait again or "
                  "Abort()")
      .Wrap(absl::DeadlineExceededError(
          absl::StrCat(op_->Describe(link), " did not complete in time: ", what)));
}

}  // namespace paddle
