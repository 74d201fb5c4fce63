// What every collective algorithm is given, and the one way it talks to its peers.
//
// An `AlgorithmContext` describes one collective operation: the Transport of its group (rank and
// world size come from it), the operation's name and sequence number, and its Deadline. The
// algorithms in this folder take it first and know nothing else of the system: no sockets, no
// store, no threads. The Communicator that owns the transport makes one context per operation:
//
//   AlgorithmContext ctx(transport, "allreduce", seq++, Deadline::After(timeout));
//   RETURN_IF_ERROR(RingAllreduce(ctx, data, count, DType::kFloat32, ReduceOp::kSum));
//
// Algorithms post sends and receives through the context (`Send`, `Recv`) and wait on them with
// `Wait`, which turns a transport failure into the error a user can act on (see Note [Algorithm
// errors]). `PeerMessage` and `MessageWindow` keep every posted buffer alive until the transport
// is done with it, on the error paths too.
//
// Note [Message tags]
// A message's tag is (seq << kTagStepBits) | step, where `step` numbers the steps of the algorithm
// (a ring allreduce's reduce-scatter steps are 0..n-2, its allgather steps n-1..2n-3). Two
// operations on one transport therefore never take each other's messages, even when one rank runs
// ahead, and a stray message names its step. Pieces of one step between one pair share the tag:
// the transport delivers messages with one tag in the order they were sent. Bit 63 is never set by
// an algorithm; it marks control messages: the context's own stamps (kAgreementTag, Note
// [Agreement check] in paddle/collective/call_stamp.h; kRingStampTag, Note [Ring stamp]) and the
// communicator's. No algorithm sends
// a zero-byte message: both sides of every message know its size, and skip it when it is empty.
//
// Note [Ring stamp]
// Stamps that ride with an operation's messages (Note [Agreement check]) are compared only by
// ranks that receive from each other in it. Ranks that call different collectives can end up
// waiting on each other in a cycle in which no stamp crosses a mismatched pair (three ranks over
// TCP: rank 0 waits in a binomial-tree broadcast from rank 1 while ranks 1 and 2 run a
// recursive-doubling allreduce), and the mismatch then showed only at the timeout. So every
// operation on a transport also passes its stamp around the ring of all ranks: rank r owes its
// stamp to r+1 and expects r-1's. If any rank's call differs, some adjacent pair r-1, r differs
// (the ring is closed). The ring has a tag of its own (kRingStampTag) and the communicator's
// RingStamps carries it:
//   1. the operation records its stamp before this rank may first block (its first Wait) or at
//      its end if it never waited: owed to the next rank, expected from the previous one;
//   2. owed stamps leave in batches (kRingBatchStamps per message, always sent whole) whenever
//      this rank might otherwise keep the next rank waiting for them: the batch is full; a Wait
//      has taken kRingSlice (the rank may be in a cycle of waits); a barrier begins (its ranks
//      wait for each other by design); a call ends that never waited (it moved no data, so its
//      stamp is all the others can go by); the rank has been idle, no operation running, for
//      kRingIdleFlush (the RingStamps' own thread sends them then); the communicator closes;
//   3. the previous rank's batches are compared by position with the stamps this rank expects:
//      the k-th stamp of the ring is the k-th operation's, whatever it was, so drift and missing
//      calls show as a mismatch. Nothing waits for them on the fast path: they are compared as
//      they arrive, at the start and end of each operation and in every Wait slower than
//      kRingSlice (again at kStampSlice, then every kStampPoll). A mismatch aborts the transport
//      with both calls named, which wakes every rank of a cycle.
// A rank blocked in a cycle has sent its stamps within kRingSlice and looks at its previous
// rank's every kStampPoll; a rank that completed its calls sends them within kRingIdleFlush.
// Cost: one message per kRingBatchStamps operations, and a receive posted per batch; none per
// operation. At most kMaxPendingRingStamps stamps may wait for their match (a rank that far ahead
// of its previous rank then waits), and the communicator waits for the last ones before it closes
// its transport (they come from ranks that reached the same calls: closing first would fail their
// send, and a receive left posted would make the close an abort): in Communicator::Shutdown,
// which returns a mismatch of the job's last call (RingStamps::Close), else in its destructor,
// which can only log it. Calls on the node workspace
// compare stamps in its rounds instead (MarkWorkspaceCall), and the contexts of a subset
// (OnSubset) leave the ring to the context of the whole group.
//
// Note [Algorithm errors]
// A failed send or receive ends the whole operation. `Wait` returns the transport's error with
// the context a user needs ("rank 2/4, peer 3 (127.0.0.1:41234), op allreduce #17, 1048576
// bytes, waited 3.1s of 300s" and what to change) and poisons the transport with it
// (Transport::Abort): the other messages of the operation may be half done, so the link can carry
// no further operation, and aborting wakes the other threads and ranks waiting on it, which then
// fail within their own deadline instead of hanging. The Communicator must then be rebuilt.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_CONTEXT_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_CONTEXT_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/core/deadline.h"
#include "paddle/core/dtype.h"
#include "paddle/core/status.h"

namespace paddle {

// Note [Message tags].
constexpr int kTagStepBits = 20;
constexpr uint64_t kMaxTagSeq = (uint64_t{1} << (63 - kTagStepBits)) - 1;
uint64_t AlgorithmTag(uint64_t seq, uint32_t step);
// The stamps of Note [Agreement check]. No sequence number: the k-th stamp one rank sends a peer
// meets the k-th stamp that peer expects, so drifted sequence numbers are reported, not waited on.
constexpr uint64_t kAgreementTag = (uint64_t{1} << 63) | 1;
// Note [Ring stamp]: the batches of stamps passed around the ring of all ranks.
constexpr uint64_t kRingStampTag = (uint64_t{1} << 63) | 4;

// Default size of the pieces that pipelined algorithms cut their blocks into, and of the segments
// that tree algorithms work through one at a time (bounding their scratch memory).
constexpr size_t kDefaultPieceBytes = size_t{256} << 10;

// Sends a pipelined algorithm keeps in flight before it waits for the oldest (MessageWindow).
constexpr size_t kPipelineSends = 4;

class AlgorithmContext;
class PeerAgreement;
class RingStamps;

// Note [Ring stamp]: stamps per batch, stamps this rank may expect before it waits for them, and
// how long a rank stays idle with stamps owed before its RingStamps sends them.
constexpr size_t kRingBatchStamps = 16;
constexpr size_t kMaxPendingRingStamps = 256;
constexpr absl::Duration kRingIdleFlush = absl::Milliseconds(10);

// Scratch memory kept from one operation to the next: a fresh std::vector per call cost a zeroing
// pass plus, above malloc's mmap threshold, an mmap, a page fault per 4 KiB and an munmap, which
// measured as a third of a 1 MiB allreduce (docs/performance-notes.md). Not thread-safe: one
// operation of a communicator runs at a time.
class ScratchArena {
 public:
  // At least `bytes` of uninitialised memory, valid until the next Get.
  uint8_t* Get(size_t bytes);

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

// One posted send or receive. The buffer it names must outlive it: declare buffers before the
// messages that use them. Destroying a message that is still pending (an early return after
// another message failed) aborts the transport and waits for the request to finish, so the
// transport never writes into freed memory.
class PeerMessage {
 public:
  PeerMessage() = default;
  PeerMessage(PeerMessage&& other) noexcept = default;
  PeerMessage& operator=(PeerMessage&& other) noexcept;
  ~PeerMessage() { Drain(); }

  // True between posting and a Wait that returned (empty messages are never pending).
  bool pending() const { return request_ != nullptr; }

 private:
  friend class AlgorithmContext;
  void Drain();

  const AlgorithmContext* ctx_ = nullptr;
  std::unique_ptr<TransportRequest> request_;
  int peer_ = -1;
  size_t bytes_ = 0;
  uint32_t step_ = 0;
  bool is_send_ = false;
  const char* what_ = "";
};

class AlgorithmContext {
 public:
  // `transport` must outlive the context. `op_name` ("allreduce", "broadcast", ...) and `seq`
  // (at most kMaxTagSeq) name the operation in tags and errors; the same seq on every rank.
  AlgorithmContext(Transport& transport, std::string op_name, uint64_t seq, Deadline deadline);

  Transport& transport() const { return *transport_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& op_name() const { return op_name_; }
  uint64_t seq() const { return seq_; }
  const Deadline& deadline() const { return deadline_; }

  // Piece size of the pipelined algorithms (kDefaultPieceBytes): smaller pieces start the
  // pipeline sooner, larger ones cost fewer messages. Must be at least 1; the same on every rank.
  size_t piece_bytes() const { return piece_bytes_; }
  AlgorithmContext& set_piece_bytes(size_t bytes);

  // Scratch memory for this operation (uninitialised), from the arena given to set_scratch_arena
  // or else one of the context's own. One scratch buffer per operation: a second call returns
  // the same memory.
  uint8_t* Scratch(size_t bytes) const;
  AlgorithmContext& set_scratch_arena(std::shared_ptr<ScratchArena> arena);

  // Note [Agreement check]: with a stamp set, the first message sent to each peer is preceded by
  // this rank's stamp, and the first message received from each peer is used only once that
  // peer's stamp matched (Wait fails with the mismatch otherwise, the transport aborted).
  // `send_counts` / `recv_counts` (alltoallv, one per rank) fill each peer's stamp's pair counts.
  // Copies made by AfterSteps share the peers' state; set it before the first message.
  AlgorithmContext& set_stamp(const CallStamp& stamp, std::vector<int64_t> send_counts = {},
                              std::vector<int64_t> recv_counts = {});
  // The stamp set, if any (the workspace collectives compare it per round).
  const CallStamp* stamp() const;
  // Note [Ring stamp]: the ring of the context's transport (the communicator's, which outlives the
  // context); without one the operation takes no part in the ring. Slow Waits also look at it.
  AlgorithmContext& set_ring_stamps(RingStamps* ring_stamps);
  // Note [Ring stamp], after the algorithm returned OK: this rank's stamp is recorded (if no Wait
  // did it already) and the previous rank's stamps that arrived are compared. Never waits for
  // them (unless kMaxPendingRingStamps are expected). A mismatch aborts the transport, as in
  // Wait. OK at once without a stamp or a ring, with one rank, or after MarkWorkspaceCall. Every
  // rank of a call on the transport must call it (the ring stays in step only if every rank
  // records one stamp per call).
  absl::Status FinishAgreement() const;
  // The call runs on the node workspace, whose rounds compare the stamps (shm_collectives.cc):
  // no ring. Before the first message; every rank of the call must take the same path.
  void MarkWorkspaceCall() const;

  // A copy whose steps start `steps` later: the second phase of a composite algorithm (ring
  // allreduce = reduce-scatter, then allgather) gets tags of its own.
  AlgorithmContext AfterSteps(uint32_t steps) const;
  // The same operation among a subset of the ranks (`subset` views this context's transport):
  // same name, sequence number, deadline, piece size and stamp, its own peers.
  AlgorithmContext OnSubset(Transport& subset) const;
  uint64_t Tag(uint32_t step) const { return AlgorithmTag(seq_, first_step_ + step); }

  // Post a message of `bytes` to/from `peer` for `step`; `what` ("ring allgather") is a string
  // literal naming the algorithm phase in errors. bytes == 0 posts nothing and returns an empty,
  // already completed message.
  PeerMessage Send(int peer, const void* data, size_t bytes, uint32_t step, const char* what) const;
  PeerMessage Recv(int peer, void* data, size_t bytes, uint32_t step, const char* what) const;

  // Waits for `message` until the deadline. On failure: the error of Note [Algorithm errors], with
  // the transport aborted. An empty or already waited message is OK at once.
  absl::Status Wait(PeerMessage& message) const;

  // Argument errors found before any message was posted: `status` with rank and op context; the
  // transport stays usable.
  absl::Status InvalidArgument(absl::string_view message) const;
  // A failure in the middle of the operation that is not a message's (none is expected: the
  // arguments were checked first): context added and the transport aborted, as in Wait.
  absl::Status Fail(const absl::Status& status) const;

  // Argument checks shared by the algorithms; kInvalidArgument through InvalidArgument().
  absl::Status CheckBuffer(const void* data, int64_t count, DType dtype) const;
  // `counts` has one entry per rank, none negative, and their sum times the element size fits.
  absl::Status CheckCounts(absl::Span<const int64_t> counts, DType dtype) const;
  absl::Status CheckRoot(int root) const;

 private:
  friend class PeerMessage;
  PeerMessage Post(int peer, void* data, size_t bytes, uint32_t step, const char* what,
                   bool is_send) const;
  // The context part of every error: rank, op and time.
  ErrorContext Describe() const;
  // Note [Algorithm errors] for `message`, which failed with `s` (`what`: "" for the message
  // itself, else the part that failed, e.g. the peer's stamp).
  absl::Status MessageFailed(PeerMessage& message, const absl::Status& s,
                             absl::string_view what) const;
  // Note [Agreement check]: before `message` (a receive, which `message_ok` or failed) is used,
  // its peer's stamp; after a failed message only a stamp already there.
  absl::Status CheckPeerStamp(PeerMessage& message, bool message_ok) const;
  // Note [Ring stamp], while `message` is slow: compares the stamps already here that were not
  // compared yet (its peer's, the ring's); a mismatch drains `message`.
  absl::Status CheckArrivedStamps(PeerMessage& message) const;
  // Note [Ring stamp]: records this operation's stamp in the ring, once (`waited`: from a Wait,
  // else from FinishAgreement: the call moved no data); an error has aborted the transport.
  absl::Status StartRing(bool waited) const;

  Transport* transport_;
  int rank_;
  int size_;
  std::string op_name_;
  uint64_t seq_;
  Deadline deadline_;
  size_t piece_bytes_ = kDefaultPieceBytes;
  mutable std::shared_ptr<ScratchArena> arena_;  // shared by the copies made by AfterSteps
  std::shared_ptr<PeerAgreement> agreement_;     // shared by the copies made by AfterSteps
  RingStamps* ring_stamps_ = nullptr;
  uint32_t first_step_ = 0;
};

// Note [Ring stamp]: one transport's ring. The operations of a communicator use it one at a time
// (each between a CallScope's construction and destruction); its own thread sends the owed stamps
// of a rank that went idle, never while an operation runs. The transport must outlive it.
class RingStamps {
 public:
  // `close_timeout`: how long Close waits for the stamps still on their way.
  RingStamps(Transport& transport, absl::Duration close_timeout);
  // Close() unless it ran (its error is logged: nobody may be left to return it to), then waits
  // for the ring's requests to finish.
  ~RingStamps();
  // After the last operation (Communicator::Shutdown): sends the owed stamps, waits for the
  // expected ones (they are on their way from ranks that reached the same calls) and compares
  // them; one that does not come within the close timeout, or differs, is the error, with the
  // transport aborted. No operation may Record after it; a second call returns the first's
  // status. Not concurrently with itself.
  absl::Status Close();
  RingStamps(const RingStamps&) = delete;
  RingStamps& operator=(const RingStamps&) = delete;

  // Marks an operation on the transport running for its lifetime: the idle flush leaves the
  // transport to it, and counts its idle time from the end of the last one. Null: no-op.
  class CallScope {
   public:
    explicit CallScope(RingStamps* ring);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    RingStamps* ring_;
  };

  // One operation's stamps: `to_next` owed to the next rank, `from_previous` (this rank's stamp
  // as the previous rank's must read) expected. `flush`: send the owed ones now (a barrier).
  // With kMaxPendingRingStamps expected, first waits for the previous rank's until `deadline`.
  // An error (a mismatch, a failed or missing batch) has aborted the transport.
  absl::Status Record(const CallStamp& to_next, const CallStamp& from_previous, bool flush,
                      const Deadline& deadline);
  // Sends the owed stamps, if any.
  void Flush();
  // Compares the previous rank's stamps that have arrived; never waits. A mismatch (or a batch
  // that is not one) is the error, with the transport aborted. A failed receive is not: the
  // transport is poisoned, and the operations fail with its cause.
  absl::Status CheckArrived();

 private:
  struct Batch;
  struct Outgoing;
  using Clock = std::chrono::steady_clock;

  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckArrivedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts the receive of the previous rank's next batch while stamps are expected and none is
  // posted (a receive left posted at close would make the transport's goodbye an abort).
  void PostReceiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the posted batch until `deadline` (none posted: OK), takes its stamps in and
  // compares. `*transport_failed`: the error is the receive's (a poisoned transport).
  absl::Status ReceiveLocked(const Deadline& deadline, bool* transport_failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CompareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error of a ring receive that failed or did not come in time.
  absl::Status ReceiveError(const absl::Status& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BeginCall();
  void EndCall();
  // The idle flush (kRingIdleFlush).
  void FlusherLoop();

  Transport& transport_;
  const absl::Duration close_timeout_;
  const int next_;
  const int previous_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<CallStamp> owed_ ABSL_GUARDED_BY(mu_);      // to the next rank, not sent yet
  std::deque<CallStamp> expected_ ABSL_GUARDED_BY(mu_);  // from the previous rank, unmatched
  std::deque<CallStamp> arrived_ ABSL_GUARDED_BY(mu_);   // from the previous rank, unmatched
  std::deque<std::unique_ptr<Outgoing>> sends_ ABSL_GUARDED_BY(mu_);  // until completed
  std::unique_ptr<Batch> in_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<TransportRequest> recv_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;   // an operation runs
  bool armed_ ABSL_GUARDED_BY(mu_) = false;  // the flusher watches the clock
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Close ran; its verdict is close_status_
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_end_ ABSL_GUARDED_BY(mu_) = Clock::now();
  std::thread flusher_;  // last: it uses everything above
};

// Messages in flight, oldest first, at most `capacity` of them: Add waits for the oldest when the
// window is full, so a long pipeline holds a bounded number of requests.
class MessageWindow {
 public:
  MessageWindow(const AlgorithmContext& ctx, size_t capacity) : ctx_(ctx), capacity_(capacity) {}

  absl::Status Add(PeerMessage message);
  absl::Status WaitAll();

 private:
  const AlgorithmContext& ctx_;
  size_t capacity_;
  std::deque<PeerMessage> messages_;
};

// Byte offset of element `index` of `dtype`.
inline size_t ByteOffset(int64_t index, DType dtype) {
  return static_cast<size_t>(index) * DTypeSize(dtype);
}

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_CONTEXT_H_
