// TcpChannel: the link to one peer over one TCP connection, carrying messages both ways.
//
// One bidirectional socket per pair of ranks, not one per direction: TCP is full duplex, the two
// directions never wait on each other, and with a single I/O thread per transport a second socket
// would only double the connections to set up (n(n-1) instead of n(n-1)/2) and the descriptors
// to watch.
//
// Note [TCP channel data path].
//  Sending: Send() appends the op to the send queue; if the queue was empty, the calling thread
//   writes at once with sendmsg(header, payload) straight from the caller's buffer until the
//   message is out or the socket is full (EAGAIN). What is left, the loop thread writes on the
//   next EPOLLOUT edge (or a thread driving the channel, Note [Waiter drives] in tcp_progress.h),
//   batching several queued messages into one sendmsg. Writers hold send_mu_, so the socket's
//   byte stream is never interleaved. Invariant: the send queue is non-empty only if the last
//   write met EAGAIN, and then output is watched (by the loop, by the driver in poll(), or, on a
//   parked socket nobody drives, by the loop once it takes the socket back), so an output edge
//   is sure to be seen.
//  Receiving (the reader: the loop thread, or a waiting thread, Note [Waiter drives] in
//   tcp_progress.h): the socket is read into a 64 KiB staging buffer while a header is
//   expected, so a burst of small messages costs one read() and their payloads one small copy.
//   The header names the tag; the oldest posted Recv with that tag is matched and the payload is
//   read straight into the caller's buffer (readv with the staging buffer as a second vector, to
//   catch the next header in the same call). With no Recv posted, the payload goes into a new
//   buffer on the unexpected list, from which a later Recv copies it (unless the reader is a
//   waiter whose own op is complete: it leaves the message where it is, Note [No read-ahead for
//   waiters] in tcp_channel.cc). A Recv posted while such a
//   message is still arriving claims it: the loop copies the part already there and reads the
//   rest straight into the caller's buffer.
//  Matching state (posted receives, unexpected messages) is shared with the calling threads under
//   recv_mu_; the message being read and the staging buffer belong to the reader alone, and
//   recv_mu_ is not held across read() or while copying a large payload.
//  Failure: a peer that closes, a read or write error, a bad header or a size mismatch poisons
//   the whole transport (Owner::Poison); the loop then calls Fail() on every channel, which fails
//   every queued and posted op and stops all I/O on the socket. Only the reader moves data into
//   posted receive buffers and Fail takes the reader role first, so failing them can never race
//   with a read into them.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_CHANNEL_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_CHANNEL_H_

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/transport/spare_buffers.h"
#include "paddle/collective/transport/tcp/tcp_loop.h"
#include "paddle/collective/transport/tcp/tcp_progress.h"
#include "paddle/collective/transport/tcp/tcp_request.h"
#include "paddle/collective/transport/tcp/tcp_socket.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Note [Lingering close] in tcp_channel_close.cc: how long a failed channel's socket stays open to
// let the peer take the abort frame.
inline constexpr absl::Duration kAbortLinger = absl::Seconds(1);

class TcpChannel final : public Channel, public TcpLoop::Handler {
 public:
  friend class TcpProgress;  // the driver moves data as the loop would (Note [Waiter drives])

  // What a channel needs from its transport.
  class Owner {
   public:
    // Poisons the whole transport with `cause`, found on the link to `peer` (the first cause
    // wins). Any thread; the caller holds no channel lock.
    virtual void Poison(const absl::Status& cause, int peer) = 0;
    // The poison cause, or OK while the transport is healthy.
    virtual absl::Status PoisonCause() const = 0;

   protected:
    ~Owner() = default;
  };

  // `wait_spin`: how long a Wait() on this channel's requests spins before sleeping when no
  // thread drives. `progress`: the transport's progress engine, which waiters drive (Note
  // [Waiter drives] in tcp_progress.h); null: only the loop thread moves data.
  // `max_unexpected_bytes`: Note [Unexpected-message limit] in tcp_channel.cc.
  TcpChannel(std::shared_ptr<const TcpLinkInfo> link, TcpSocket socket, TcpLoop* loop, Owner* owner,
             absl::Duration wait_spin, std::shared_ptr<TcpProgress> progress,
             size_t max_unexpected_bytes);
  ~TcpChannel() override;
  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;

  // Starts watching the socket on the loop.
  absl::Status Start();

  int peer() const override { return link_->peer; }
  const std::string& peer_address() const override { return link_->peer_address; }
  std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) override;
  std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) override;
  // Both messages join the send queue under one lock and leave in one sendmsg when it was idle.
  void SendPair(const void* first, size_t first_bytes, uint64_t first_tag, const void* second,
                size_t second_bytes, uint64_t second_tag,
                std::unique_ptr<TransportRequest>* first_request,
                std::unique_ptr<TransportRequest>* second_request) override;

  // Loop thread (or after the loop stopped): fails every queued and posted op with `cause`,
  // stops reading and writing, and shuts the socket down so the peer sees the link close.
  void Fail(const absl::Status& cause);

  // Note [Lingering close] in tcp_channel_close.cc: after Fail, until `deadline`, drops what
  // arrives and waits for the peer to take what was sent; then shuts the socket. Once; the
  // destructor does it if the owner did not. After the loop stopped.
  void Linger(const Deadline& deadline);

  // Note [Graceful close]: sends the close frame if no send is in flight. Any thread, before the
  // transport fails its channels on destruction.
  void SendCloseFrame();
  // No send queued and no receive posted or being filled. Any thread.
  bool Idle();
  // Fail(cause), keeping complete unexpected messages receivable when `graceful`.
  void Fail(const absl::Status& cause, bool graceful);

  bool OnEvents(uint32_t events) override;

  // Whether the peer has closed or reset the connection, as the kernel sees it now (even with
  // unread data before the close). Any thread.
  bool LinkDown() const;

  // Note [Read before blaming] in tcp_channel_close.cc: a write to this socket failed with `error`.
  // ExplainSendError (the reader role held) reads what the peer sent before the link broke and
  // returns the peer's abort cause if its abort frame is there, else `error`.
  // PoisonAfterSendError takes the reader role for that, then poisons the transport. Any thread
  // holding no channel lock and no reader role.
  absl::Status ExplainSendError(const absl::Status& error);
  void PoisonAfterSendError(const absl::Status& error);

 private:
  // Queues `count` messages in order (writing at once when the queue was idle) and returns
  // their ops.
  void SendMessages(const void* const* data, const size_t* bytes, const uint64_t* tags, int count,
                    std::shared_ptr<TcpOp>* ops);

  // A message that arrived before its Recv was posted.
  struct Unexpected {
    uint64_t tag = 0;
    size_t bytes = 0;
    SpareBuffers::Buffer data;          // Note [Spare unexpected-message buffers]
    bool complete = false;              // guarded by recv_mu_
    std::shared_ptr<TcpOp> claimed_by;  // guarded by recv_mu_: a Recv that took it mid-arrival
  };
  // The message the loop is reading (loop thread only).
  struct Inbound {
    bool active = false;  // its header has been read
    uint64_t tag = 0;
    size_t bytes = 0;
    size_t received = 0;
    std::shared_ptr<TcpOp> op;               // read into a posted Recv's buffer ...
    std::shared_ptr<Unexpected> unexpected;  // ... or into an unexpected-message buffer ...
    bool abort = false;                      // ... or it is the peer's abort frame
    std::string abort_text;
    char* dest() {
      if (op != nullptr) return op->data;
      return abort ? abort_text.data() : unexpected->data.data.get();
    }
  };

  std::unique_ptr<TransportRequest> MakeRequest(std::shared_ptr<TcpOp> op) const;

  // Writes queued messages until the queue is empty or the socket is full; `done` gets the ops
  // written in full. An error is the write failure, to poison with.
  absl::Status WriteQueued(std::vector<std::shared_ptr<TcpOp>>* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Writes queued messages if no other thread is writing; if one is, leaves it a note
  // (write_missed_) to write again once it lets go. Any thread holding no channel lock.
  absl::Status TryWrite();
  // After letting send_mu_ go without writing: acts on a note left meanwhile, poisoning on error.
  void WriteMissed();
  // Note [Waiter drives] in tcp_progress.h: the loop's watch on the socket. WatchOutput asks the
  // loop for output edges (sends are queued; any thread holding no channel lock). Park turns
  // the loop's watch off for the progress engine, Unpark turns it back on (under the engine's
  // driver role, holding no channel lock).
  void WatchOutput();
  void Park();
  void Unpark();
  // On the loop thread, after Unpark: reads what a driver left in the staging buffer (Note [No
  // read-ahead for waiters] in tcp_channel.cc), as no input edge may come for it.
  void ReadHeld();
  // The reader (Note [Waiter drives]): reads until EAGAIN or the per-turn budget; returns true if
  // the budget ran out. A driver passes the op it waits for (`waited`): once that is complete it
  // reads on only into posted receives (Note [No read-ahead for waiters] in tcp_channel.cc).
  bool ReadAvailable(absl::Status* error, const TcpOp* waited = nullptr);
  // The reader, after a read met EAGAIN: sets SO_RCVLOWAT for what is due next.
  void SetLowWater();
  // After the reader role was released: while an input edge was missed meanwhile, takes the role
  // again if free and reads. Not on the loop thread.
  static void ReadMissed(TcpReaderHook& hook);
  // The reader, under recv_mu_: parses what the staging buffer holds, moving payloads to their
  // destination; `done` gets the receives completed. Once `waited` (if any) is complete, a data
  // message no Recv is posted for stays staged, header and all, and `*held` is set (Note [No
  // read-ahead for waiters]).
  absl::Status ConsumeStaged(std::vector<std::shared_ptr<TcpOp>>* done, const TcpOp* waited,
                             bool* held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  absl::Status StartMessage(const tcp_wire::MessageHeader& header,
                            std::vector<std::shared_ptr<TcpOp>>* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Keeps the buffer of an unexpected message that was copied out, for the next one
  // (Note [Spare unexpected-message buffers]). Any thread holding no channel lock.
  void Recycle(Unexpected& message);
  // Note [Unexpected-message limit] in tcp_channel.cc.
  absl::Status CheckUnexpectedLimit(uint64_t tag, size_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Hands the message to its receiver; an abort frame returns the peer's cause instead.
  absl::Status FinishMessage(std::vector<std::shared_ptr<TcpOp>>* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // If a Recv claimed the unexpected message being read, makes its buffer the destination of
  // the rest and returns the buffer holding what already arrived (to copy without the lock).
  std::shared_ptr<Unexpected> SwitchToClaimant(size_t* arrived)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);
  // Prepares the next read's vectors; returns their count.
  int NextReadVectors(iovec* iov) ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu_);

  // Best effort, at a message boundary only: tells the peer why this transport is closing.
  void SendAbortFrame(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);

  absl::Status SizeMismatch(const TcpOp& op, size_t sent_bytes) const;
  absl::Status PeerAborted(uint64_t code, const std::string& text) const;
  absl::Status PeerClosed() const;
  absl::Status PeerClosedGracefully() const;
  absl::Status IoError(const char* what, int err) const;

  const std::shared_ptr<const TcpLinkInfo> link_;
  TcpSocket socket_;
  TcpLoop* const loop_;
  Owner* const owner_;
  const absl::Duration wait_spin_;
  const size_t max_unexpected_bytes_;
  const std::shared_ptr<TcpProgress> progress_;  // null: waiters do not drive
  std::atomic<bool> failed_{false};              // Fail() has begun: nothing more to move

  std::mutex send_mu_;
  std::deque<std::shared_ptr<TcpOp>> send_queue_ ABSL_GUARDED_BY(send_mu_);
  int64_t send_seq_ ABSL_GUARDED_BY(send_mu_) = 0;
  bool send_closed_ ABSL_GUARDED_BY(send_mu_) = false;
  std::atomic<bool> send_pending_{false};  // the send queue is not empty (set under send_mu_)
  std::atomic<bool> write_missed_{false};  // someone found send_mu_ taken and wanted to write
  // A driver stopped reading with bytes left in the staging buffer (Note [No read-ahead for
  // waiters] in tcp_channel.cc).
  std::atomic<bool> staged_held_{false};

  // Note [Waiter drives]: the loop's watch on the socket, changed under watch_mu_ only.
  std::mutex watch_mu_;
  bool parked_ ABSL_GUARDED_BY(watch_mu_) = false;         // the loop watches nothing
  bool output_watched_ ABSL_GUARDED_BY(watch_mu_) = true;  // the loop watches EPOLLOUT

  std::mutex recv_mu_;
  // Both in arrival (posting) order; a receive matches the first entry with its tag. A linear
  // scan, since only a handful are outstanding per peer at a time.
  std::deque<std::shared_ptr<TcpOp>> posted_ ABSL_GUARDED_BY(recv_mu_);
  std::deque<std::shared_ptr<Unexpected>> unexpected_ ABSL_GUARDED_BY(recv_mu_);
  SpareBuffers spare_ ABSL_GUARDED_BY(recv_mu_);
  int64_t recv_seq_ ABSL_GUARDED_BY(recv_mu_) = 0;
  bool recv_closed_ ABSL_GUARDED_BY(recv_mu_) = false;
  // Note [Graceful close]: the peer's close frame was read (`goodbye_`), the channel's failure
  // was handed to the loop (`goodbye_posted_`), and, once failed, the complete messages that had
  // arrived are kept for later receives (`closed_gracefully_`, with `close_cause_`).
  bool goodbye_ ABSL_GUARDED_BY(recv_mu_) = false;
  bool goodbye_posted_ ABSL_GUARDED_BY(recv_mu_) = false;
  bool closed_gracefully_ ABSL_GUARDED_BY(recv_mu_) = false;
  absl::Status close_cause_ ABSL_GUARDED_BY(recv_mu_);

  const std::shared_ptr<TcpReaderHook> reader_ = std::make_shared<TcpReaderHook>();

  // Loop thread only (and Linger, after the loop stopped).
  bool io_closed_ = false;
  bool lingered_ = false;
  // The reader only (Note [Waiter drives]): guarded by reader_->mu.
  Inbound in_;
  // Large enough for hundreds of small messages per read(); small enough to stay in cache.
  static constexpr size_t kStagingBytes = 64 << 10;
  std::unique_ptr<char[]> staging_;
  size_t staged_begin_ = 0;
  size_t staged_end_ = 0;
  bool read_into_payload_ = false;  // the last read's first vector was in_'s payload
  bool peer_aborted_ = false;       // the peer's abort frame has been read
  int low_water_ = 1;               // the socket's SO_RCVLOWAT (Note [Receive low-water mark])
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_CHANNEL_H_
