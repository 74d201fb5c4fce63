// UcxOp and UcxRequest: one posted send or receive of the UCX transport, and the handle the
// caller waits on.
//
// The op is shared by the caller's handle and its channel's pending list (std::shared_ptr), so
// either may go first. The transport completes every op before it is destroyed, so a handle that
// outlives its transport returns that outcome from Wait() without touching the transport.
//
// Completion is an atomic flag plus the status under a mutex. A waiter does not sleep on the op:
// it drives UCX progress itself (UcxWaiter::Await, Note [Waiting] in ucx_transport.cc).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_REQUEST_H_
#define PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_REQUEST_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Who is at each end of a link, for error messages; shared by a channel and its requests.
struct UcxLinkInfo {
  int rank = -1;
  int world_size = 0;
  int peer = -1;
  std::string peer_address;  // "host pid N": UCX worker addresses are binary
};

class UcxChannel;

class UcxOp {
 public:
  enum class Kind { kSend, kRecv };

  UcxOp(Kind kind, const void* data, size_t bytes, uint64_t tag, int64_t seq)
      : kind(kind),
        data(static_cast<char*>(const_cast<void*>(data))),
        bytes(bytes),
        tag(tag),
        seq(seq) {}
  UcxOp(const UcxOp&) = delete;
  UcxOp& operator=(const UcxOp&) = delete;

  const Kind kind;
  char* const data;  // the caller's buffer, never owned
  const size_t bytes;
  const uint64_t tag;
  const int64_t seq;  // per channel and direction, from 0
  // The channel that posted it (for UCX callbacks) and the UCX request while one is
  // outstanding; guarded by that channel's worker lock.
  UcxChannel* channel = nullptr;
  void* ucx_request = nullptr;

  // Records the outcome; later calls are ignored. Returns whether this call completed the op.
  bool Complete(const absl::Status& status);
  // Complete() with `cause` prefixed by Describe().
  bool Fail(const absl::Status& cause, const UcxLinkInfo& link);
  bool IsCompleted() const { return completed_.load(std::memory_order_acquire); }
  // The outcome; only once IsCompleted().
  absl::Status status() const;

  // "send #3 (tag 7, 4096 bytes) to peer 1 (host pid 42)"
  std::string Describe(const UcxLinkInfo& link) const;

 private:
  std::atomic<bool> completed_{false};
  mutable std::mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// What a request needs from its transport to wait.
class UcxWaiter {
 public:
  // Drives progress until `op` completes (true) or `deadline` passes (false, op still pending).
  // Also runs the transport's teardown if it is poisoned, even when `op` is already complete.
  virtual bool Await(const UcxOp& op, const Deadline& deadline) = 0;

 protected:
  ~UcxWaiter() = default;
};

// The transport as its requests see it: cleared when the transport is destroyed, so a request
// that outlives it returns its (failed) outcome without touching it. Waiting on a request while
// another thread destroys its transport is not allowed.
using UcxWaiterHandle = std::atomic<UcxWaiter*>;

class UcxRequest final : public TransportRequest {
 public:
  UcxRequest(std::shared_ptr<UcxOp> op, std::shared_ptr<const UcxLinkInfo> link,
             std::shared_ptr<UcxWaiterHandle> waiter)
      : op_(std::move(op)), link_(std::move(link)), waiter_(std::move(waiter)) {}

  // A timeout names the op and the time waited; the request stays pending.
  absl::Status Wait(const Deadline& deadline) override;
  bool IsCompleted() const override { return op_->IsCompleted(); }

 private:
  std::shared_ptr<UcxOp> op_;
  std::shared_ptr<const UcxLinkInfo> link_;
  std::shared_ptr<UcxWaiterHandle> waiter_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_REQUEST_H_
