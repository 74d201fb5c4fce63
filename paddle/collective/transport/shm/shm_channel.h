// ShmChannel: the link to one peer on this host over two rings (the peer's ring in this rank's
// segment for what arrives, this rank's ring in the peer's segment for what leaves), plus
// ShmOp/ShmRequest, one posted send or receive.
//
// Note [Shm channel data path].
//  Sending: Send() queues the message; if nothing is queued ahead, the calling thread writes it
//   into the peer's ring at once. A message of up to kShmEagerMaxBytes goes whole into the ring
//   (eager) and the send completes inside Send(). A larger one, if the peer can read this process
//   with CMA, goes as a descriptor (tag, size, buffer address, id); the peer copies the buffer
//   with process_vm_readv straight into its receive buffer and answers with an acknowledgement
//   record that completes the send. Without CMA it is streamed through the ring in pieces of
//   kShmStreamPieceBytes. What does not fit is written later by whoever drives progress.
//  Receiving: whoever drives progress (a thread in Wait(), or the transport's background thread
//   when nobody waits) reads the records in the inbound ring in order. A record's tag is matched
//   against the posted receives (oldest first); an eager payload or stream piece is copied into
//   the receive buffer, a descriptor is read with CMA. With no receive posted, an eager or
//   streamed payload is copied into a buffer of the unexpected list and a descriptor is kept
//   there as it is; Recv() takes the oldest unexpected message with its tag, copies it or reads
//   it with CMA on the caller's thread, or claims a stream still arriving.
//  Locks: send_mu_ guards the outbound ring and queue, recv_mu_ the inbound ring and matching
//   state; recv_mu_ may be held while taking send_mu_ (to queue an acknowledgement), never the
//   other way. Progress only try-locks, so a waiter never blocks behind another one.
//  Untrusted input: every record read from the inbound ring is checked against the ring and then
//   against the receive state before a byte is copied (Note [Untrusted rings] in shm_ring.h): a
//   stream piece must continue the message streaming in at the offset received so far, within
//   its size; a new message may not start while one streams in.
//  Failure: Fail() completes every queued, posted and in-flight op with the transport's cause and
//   refuses new ones; errors found while moving data are returned to the transport, which
//   poisons itself outside the channel's locks.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_CHANNEL_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_CHANNEL_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "paddle/collective/transport/shm/shm_ring.h"
#include "paddle/collective/transport/spare_buffers.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/core/deadline.h"

namespace paddle {

// Who is at each end of a link, for error messages.
struct ShmLinkInfo {
  int rank = -1;
  int world_size = 0;
  int peer = -1;
  pid_t peer_pid = 0;
  std::string peer_address;  // "pid 1234 on <host identity>"
};

class ShmOp {
 public:
  enum class Kind { kSend, kRecv };
  ShmOp(Kind kind, const void* data, size_t bytes, uint64_t tag, int64_t seq)
      : kind(kind),
        data(static_cast<char*>(const_cast<void*>(data))),
        bytes(bytes),
        tag(tag),
        seq(seq) {}
  ShmOp(const ShmOp&) = delete;
  ShmOp& operator=(const ShmOp&) = delete;

  const Kind kind;
  char* const data;  // the caller's buffer, never owned
  const size_t bytes;
  const uint64_t tag;
  const int64_t seq;  // per channel and direction, from 0

  // Records the outcome (the first call wins).
  void Complete(const absl::Status& status);
  bool IsCompleted() const { return completed_.load(std::memory_order_acquire); }
  // The outcome; only after IsCompleted().
  absl::Status status() const;
  // "send #3 (tag 7, 4096 bytes) to peer 1 (pid 99 on host)"
  std::string Describe(const ShmLinkInfo& link) const;

 private:
  std::atomic<bool> completed_{false};
  mutable std::mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class ShmChannel final : public Channel {
 public:
  // What a channel and its requests need from the transport.
  class Owner {
   public:
    virtual ~Owner() = default;
    // The poison cause, or OK while healthy.
    virtual absl::Status PoisonCause() const = 0;
    // Poisons the transport (first cause wins). Never called with a channel lock held.
    virtual void Poison(const absl::Status& cause) = 0;
    // Drives progress on every channel until `op` completes, the transport fails or `deadline`
    // passes (then kDeadlineExceeded with how long was waited; the op stays pending).
    virtual absl::Status Await(const ShmOp& op, const Deadline& deadline) = 0;
    // Rings this process's own doorbell: wakes its waiters after ops completed.
    virtual void WakeLocal() = 0;
    // A reference that keeps the owner (not the Transport) alive for a request.
    virtual std::shared_ptr<Owner> Handle() = 0;
  };

  // `inbound`: the peer's ring in this rank's segment; `outbound`: this rank's ring in the peer's
  // segment; `peer_control` the control block of the peer's segment (its doorbell and abort flag).
  // `peer_reads_cma`: the peer can read this process with CMA (large sends go as descriptors).
  ShmChannel(ShmLinkInfo link, Owner* owner, ShmRing inbound, ShmRing outbound,
             ShmControl* peer_control, bool peer_reads_cma);
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  int peer() const override { return link_->peer; }
  const std::string& peer_address() const override { return link_->peer_address; }
  std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) override;
  std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) override;

  // Moves what it can in both directions without blocking; returns the first error (the caller
  // poisons the transport with it). `completed` is set if some op completed.
  absl::Status Progress(bool* completed);
  // Fails every pending op with `cause` and refuses new ones.
  void Fail(const absl::Status& cause);

  bool peer_reads_cma() const { return peer_reads_cma_; }
  const ShmLinkInfo& link() const { return *link_; }

 private:
  struct OutMsg {
    ShmRecordKind kind;
    std::shared_ptr<ShmOp> op;  // null for acknowledgements
    uint64_t id = 0;            // CMA sends and acknowledgements
    size_t offset = 0;          // streams: bytes written so far
  };
  // A message that arrived before its receive was posted.
  struct Unexpected {
    uint64_t tag = 0;
    size_t bytes = 0;
    SpareBuffers::Buffer data;  // the payload (CMA messages are pulled on arrival)
    bool complete = false;      // all of `data` arrived
  };
  using OpList = std::vector<std::shared_ptr<ShmOp>>;

  std::unique_ptr<TransportRequest> MakeRequest(std::shared_ptr<ShmOp> op);
  // Queues `message` and writes what fits; an error means the ring is corrupt (the caller
  // poisons the transport with it).
  absl::Status Enqueue(OutMsg message, OpList* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  absl::Status WriteQueued(OpList* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  absl::Status ReadInbound(OpList* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  absl::Status OnRecord(const ShmRecord& record, const char* payload, OpList* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Reads a CMA message into `op`, completes it, then queues the acknowledgement.
  absl::Status ReadCma(ShmOp& op, uint64_t address, uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  void CompleteAll(OpList& done);

  // `status` (kDataLoss: Note [Untrusted rings] in shm_ring.h) with this link's ranks and a hint.
  absl::Status CorruptRing(const absl::Status& status) const;

  const std::shared_ptr<const ShmLinkInfo> link_;
  Owner* const owner_;
  ShmControl* const peer_control_;
  const bool peer_reads_cma_;

  std::mutex send_mu_;
  ShmRing outbound_ ABSL_GUARDED_BY(send_mu_);
  std::deque<OutMsg> queue_ ABSL_GUARDED_BY(send_mu_);
  std::map<uint64_t, std::shared_ptr<ShmOp>> awaiting_ack_ ABSL_GUARDED_BY(send_mu_);
  int64_t send_seq_ ABSL_GUARDED_BY(send_mu_) = 0;
  bool send_closed_ ABSL_GUARDED_BY(send_mu_) = false;
  std::atomic<bool> queued_{false};  // queue_ is non-empty (read without the lock)

  std::mutex recv_mu_;
  ShmRing inbound_ ABSL_GUARDED_BY(recv_mu_);
  std::deque<std::shared_ptr<ShmOp>> posted_ ABSL_GUARDED_BY(recv_mu_);
  std::deque<std::shared_ptr<Unexpected>> unexpected_ ABSL_GUARDED_BY(recv_mu_);
  int64_t recv_seq_ ABSL_GUARDED_BY(recv_mu_) = 0;
  bool recv_closed_ ABSL_GUARDED_BY(recv_mu_) = false;
  // The streamed message arriving now: into a posted receive, or an unexpected buffer.
  std::shared_ptr<ShmOp> stream_op_ ABSL_GUARDED_BY(recv_mu_);
  std::shared_ptr<Unexpected> stream_buffer_ ABSL_GUARDED_BY(recv_mu_);
  size_t stream_received_ ABSL_GUARDED_BY(recv_mu_) = 0;
  SpareBuffers spare_ ABSL_GUARDED_BY(recv_mu_);  // Note [Spare unexpected-message buffers]
  // For checking, without the lock, whether the inbound ring has records.
  ShmRing inbound_probe_;
};

class ShmRequest final : public TransportRequest {
 public:
  ShmRequest(std::shared_ptr<ShmOp> op, std::shared_ptr<const ShmLinkInfo> link,
             std::shared_ptr<ShmChannel::Owner> owner)
      : op_(std::move(op)), link_(std::move(link)), owner_(std::move(owner)) {}
  // A timeout names the op and the time waited; the op stays pending.
  absl::Status Wait(const Deadline& deadline) override;
  bool IsCompleted() const override { return op_->IsCompleted(); }

 private:
  std::shared_ptr<ShmOp> op_;
  const std::shared_ptr<const ShmLinkInfo> link_;
  std::shared_ptr<ShmChannel::Owner> owner_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_CHANNEL_H_
