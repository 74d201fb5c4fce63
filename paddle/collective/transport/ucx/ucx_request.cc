// UcxOp completion and UcxRequest::Wait; see ucx_request.h.
#include "paddle/collective/transport/ucx/ucx_request.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {

bool UcxOp::Complete(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (completed_.load(std::memory_order_relaxed)) return false;
  // A fresh copy: see Note [Locks and ThreadSanitizer] in tcp/tcp_request.h.
  status_ = status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
  completed_.store(true, std::memory_order_release);
  return true;
}

bool UcxOp::Fail(const absl::Status& cause, const UcxLinkInfo& link) {
  return Complete(Annotate(cause, Describe(link)));
}

absl::Status UcxOp::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_.ok() ? absl::OkStatus() : absl::Status(status_.code(), status_.message());
}

std::string UcxOp::Describe(const UcxLinkInfo& link) const {
  return absl::StrCat(kind == Kind::kSend ? "send #" : "recv #", seq, " (tag ", tag, ", ", bytes,
                      " bytes) ", kind == Kind::kSend ? "to" : "from", " peer ", link.peer, " (",
                      link.peer_address, ")");
}

absl::Status UcxRequest::Wait(const Deadline& deadline) {
  UcxWaiter* waiter = waiter_->load(std::memory_order_acquire);
  if (waiter == nullptr || waiter->Await(*op_, deadline)) return op_->status();
  const UcxLinkInfo& link = *link_;
  return ErrorContext()
      .Rank(link.rank, link.world_size)
      .Peer(link.peer, link.peer_address)
      .Op(op_->kind == UcxOp::Kind::kSend ? "send" : "recv", op_->seq)
      .Bytes(static_cast<int64_t>(op_->bytes))
      .Waited(deadline.Elapsed(), deadline.timeout())
      .Hint(op_->kind == UcxOp::Kind::kSend
                ? "the peer is not receiving; the request stays pending: wait again or Abort()"
                : "the peer has not sent it yet; the request stays pending: wait again or "
                  "Abort()")
      .Wrap(absl::DeadlineExceededError(
          absl::StrCat(op_->Describe(link), " did not complete in time")));
}

}  // namespace paddle
