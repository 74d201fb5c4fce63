// TcpOp and TcpRequest: one posted send or receive of the TCP transport, and the handle the
// caller waits on.
//
// The op is shared by the caller's handle and the channel's queues (std::shared_ptr), so either
// may go first: a caller may drop a handle it no longer cares about, and a handle may outlive its
// transport (the transport fails every pending op before it goes, so a late Wait returns that
// failure instead of touching freed state).
//
// Completion is one atomic flag plus a mutex and condition variable the waiter sleeps on; the
// completing thread signals only if someone sleeps. Wait() may first spin on the flag for a
// configurable few microseconds (Note [Busy polling] in tcp_tuning.h).
//
// Note [Locks and ThreadSanitizer]. The transport locks with std::mutex, not absl::Mutex: the
// system Abseil is built without ThreadSanitizer, so its Mutex is invisible to TSan and every
// field it guards would be reported as racy, hiding real races among the false ones. pthread
// mutexes are intercepted, so `--config=tsan` really checks the transport's locking. For the
// same reason a status handed to another thread is a fresh copy (CopyStatus), not a second
// reference to one shared representation: its reference count is as invisible to TSan as the
// Mutex, and the final free of a shared one would look like a race with every earlier read.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_REQUEST_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_REQUEST_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Who is at each end of a link, for error messages; shared by a channel and its requests.
struct TcpLinkInfo {
  int rank = -1;
  int world_size = 0;
  int peer = -1;
  std::string peer_address;
};

class TcpChannel;
class TcpProgress;

// The reading side of a channel. `mu` is the reader role: whoever holds it (the loop thread on an
// input edge, or a thread driving the transport, Note [Waiter drives] in tcp_progress.h) alone
// reads the socket and parses what arrives. Rules:
//  - The loop thread sets `missed` before it try_locks the role; a holder that releases the role
//    checks `missed` after unlocking and, if set, takes the role again and reads, so an input
//    edge the loop had to skip is never lost. Writers do the same with send_mu_ and
//    `write_missed_` (tcp_channel.cc).
//  - TcpChannel::Fail shuts the socket down before taking the role: that wakes a driver asleep in
//    poll(). The channel's destructor detaches itself (channel = nullptr) under `mu`, so a holder
//    that outlives it never touches it.
struct TcpReaderHook {
  std::mutex mu;
  TcpChannel* channel = nullptr;  // guarded by mu
  std::atomic<bool> missed{false};
};

// A copy of `status` that shares nothing with it (see Note [Locks and ThreadSanitizer]).
absl::Status CopyStatus(const absl::Status& status);

class TcpOp {
 public:
  enum class Kind { kSend, kRecv };

  TcpOp(Kind kind, const void* data, size_t bytes, uint64_t tag, int64_t seq);
  TcpOp(const TcpOp&) = delete;
  TcpOp& operator=(const TcpOp&) = delete;

  const Kind kind;
  // The caller's buffer: read by a send, written by a receive. Never owned.
  char* const data;
  const size_t bytes;
  const uint64_t tag;
  const int64_t seq;  // per channel and direction, from 0
  // Sends: the message header, written in front of the payload.
  char header[tcp_wire::kMessageHeaderBytes];

  // Sends: header and payload bytes written; receives: payload bytes received. Advanced only by
  // the one thread moving this op's data at a time; atomic so a timed-out Wait can report it.
  std::atomic<uint64_t> progress{0};

  // Records the outcome and wakes the waiters; later calls are ignored.
  void Complete(const absl::Status& status);
  // Complete() with `cause` prefixed by what this op was ("recv #3 (tag 7, 4096 bytes) from
  // peer 1 (10.0.0.2:4000)").
  void Fail(const absl::Status& cause, const TcpLinkInfo& link);
  bool IsCompleted() const { return completed_.load(std::memory_order_acquire); }
  // Waits for the outcome and stores it in *status; false if `deadline` passes first (the op
  // stays pending). Spins on the completion flag for up to `spin` before sleeping.
  bool Await(const Deadline& deadline, absl::Duration spin, absl::Status* status);

  // "send #3 (tag 7, 4096 bytes) to peer 1 (10.0.0.2:4000)"
  std::string Describe(const TcpLinkInfo& link) const;

 private:
  std::atomic<bool> completed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class TcpRequest final : public TransportRequest {
 public:
  // `progress`: the transport's progress engine, which the waiter drives (Note [Waiter drives]
  // in tcp_progress.h); null: the waiter only sleeps (spinning for `spin` first).
  TcpRequest(std::shared_ptr<TcpOp> op, std::shared_ptr<const TcpLinkInfo> link,
             absl::Duration spin, std::shared_ptr<TcpProgress> progress)
      : op_(std::move(op)), link_(std::move(link)), spin_(spin), progress_(std::move(progress)) {}

  // A timeout names the op, its progress and the time waited.
  absl::Status Wait(const Deadline& deadline) override;
  bool IsCompleted() const override { return op_->IsCompleted(); }

 private:
  std::shared_ptr<TcpOp> op_;
  std::shared_ptr<const TcpLinkInfo> link_;
  absl::Duration spin_;
  std::shared_ptr<TcpProgress> progress_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_REQUEST_H_
