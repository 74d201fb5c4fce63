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
// configurable few microseconds (Note [Busy polling] in tcp_transport.cc).
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

// Note [Waiter drives]. The reading side of a channel, shared by the channel and the requests
// its waiters may drive. `mu` is the reader role: whoever holds it (the loop thread on an input
// edge, or a thread waiting for one of the channel's requests) alone reads the socket and parses
// what arrives. A thread waiting for a send or receive of up to kWaiterDrivesMaxBytes
// (tcp_channel.cc) that takes the role moves the channel's data itself, like an MPI progress
// engine: it reads the socket, writes the queued sends when the socket has room, and sleeps in
// poll() on the socket rather than on a condition variable the loop thread must signal. While it
// drives, the loop stops watching the socket (epoll_ctl with no events, re-armed when it leaves),
// so each arrival wakes one thread, not the waiter and the idle loop thread both; wake-ups and
// thread hand-offs were most of a small message's cost on the 2-core development VM. Measured
// there against OpenMPI over TCP, interleaved runs: allreduce 4-64 KiB on 4 ranks went from
// 0.44-0.93x to 0.53-1.11x OpenMPI's speed (4 KiB 238 -> 142-169 us), on 2 ranks from
// 0.40-0.74x to 0.50-1.04x. Rules:
//  - Waiters only try_lock; one that cannot drive sleeps on its op as before (the holder reads
//    its message too, and completes it; the loop writes its send).
//  - The loop thread sets `missed` before its try_lock; a holder that releases the role checks
//    `missed` after unlocking and, if set, takes the role again and reads, so an input edge the
//    loop had to skip is never lost. Writers do the same with send_mu_ and `write_missed_`.
//  - The loop's watch changes under the channel's watch_mu_ only: a driver turns it off when it
//    starts and back on when it leaves (output only while sends are queued: a writable socket
//    would wake the loop for nothing); a Send that leaves data queued asks for output edges
//    unless a driver is active, which then sees the queued data when it leaves.
//  - TcpChannel::Fail shuts the socket down before taking the role: that wakes a waiter asleep in
//    poll(). The channel's destructor detaches itself (channel = nullptr) under `mu`, so a request
//    that outlives its transport never touches it.
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
  // `reader`: the channel's reading side when the waiter may drive it (Note [Waiter drives]).
  TcpRequest(std::shared_ptr<TcpOp> op, std::shared_ptr<const TcpLinkInfo> link,
             absl::Duration spin, std::shared_ptr<TcpReaderHook> reader)
      : op_(std::move(op)), link_(std::move(link)), spin_(spin), reader_(std::move(reader)) {}

  // A timeout names the op, its progress and the time waited.
  absl::Status Wait(const Deadline& deadline) override;
  bool IsCompleted() const override { return op_->IsCompleted(); }

 private:
  std::shared_ptr<TcpOp> op_;
  std::shared_ptr<const TcpLinkInfo> link_;
  absl::Duration spin_;
  std::shared_ptr<TcpReaderHook> reader_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_REQUEST_H_
