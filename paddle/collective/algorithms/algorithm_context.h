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
// [Agreement check] in paddle/collective/call_stamp.h) and the communicator's. No algorithm sends
// a zero-byte message: both sides of every message know its size, and skip it when it is empty.
//
// Note [Ring stamp]
// Stamps that ride with an operation's messages (Note [Agreement check]) are compared only by
// ranks that receive from each other in it. Ranks that call different collectives can end up
// waiting on each other in a cycle in which no stamp crosses a mismatched pair (three ranks over
// TCP: rank 0 waits in a binomial-tree broadcast from rank 1 while ranks 1 and 2 run a
// recursive-doubling allreduce), and the mismatch then showed only at the timeout. So every
// operation on a transport also sends its stamp around the ring of all ranks: rank r sends its
// stamp to r+1 before it may first block (Wait) or at the end if it never waited, and posts the
// receive of r-1's. If any rank's call differs, some adjacent pair r-1, r differs (the ring is
// closed), and r-1's stamp reaches r without r-1 waiting for anything. Nothing waits for r-1's
// stamp on the fast path: at the end of the operation (FinishAgreement) it is compared if it
// has arrived, else it is kept pending in the communicator's RingStamps, which compares it at
// the start of the next operation or while a Wait is slow (kStampSlice, then every kStampPoll).
// A Wait that takes long looks at every stamp that arrived (its peer's, r-1's of this and of
// earlier operations) and a mismatch aborts the transport with both calls named, which wakes
// every rank of the cycle. The k-th stamp on a link meets the k-th receive posted there, as
// every stamp does. Cost: where the next rank is also a peer (ring algorithms, the barrier) the
// stamp rides with the first message; elsewhere (trees) one 48-byte message per operation. At
// most kMaxPendingRingStamps operations may wait for their stamp (a rank that far ahead of its
// previous rank then waits), and the communicator waits for the last ones before it closes its
// transport (they are on their way: closing first would fail the sender). Calls on the node
// workspace compare stamps in its rounds instead (MarkWorkspaceCall), and the contexts of a
// subset (OnSubset) leave the ring to the context of the whole group.
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

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

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

// Default size of the pieces that pipelined algorithms cut their blocks into, and of the segments
// that tree algorithms work through one at a time (bounding their scratch memory).
constexpr size_t kDefaultPieceBytes = size_t{256} << 10;

// Sends a pipelined algorithm keeps in flight before it waits for the oldest (MessageWindow).
constexpr size_t kPipelineSends = 4;

class AlgorithmContext;
class PeerAgreement;
class RingStamps;

// Note [Ring stamp]: operations kept until the previous rank's ring stamp arrives.
constexpr size_t kMaxPendingRingStamps = 256;

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
  // Note [Ring stamp]: where operations whose previous rank's stamp has not arrived yet wait to be
  // compared (the communicator's, which outlives the context); without one, FinishAgreement waits
  // for that stamp. Slow Waits also look at it.
  AlgorithmContext& set_ring_stamps(RingStamps* ring_stamps);
  // Note [Ring stamp], after the algorithm returned OK: this rank's stamp has left for the next
  // rank (if no message took it already) and the previous rank's is compared if it is here, else
  // kept in the RingStamps. Never waits for it there. A mismatch aborts the transport, as in Wait.
  // OK at once without a stamp, with one rank, or after MarkWorkspaceCall. Every rank of a call
  // on the transport must call it (the links stay in step only if every rank sends and expects
  // one ring stamp per call).
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
  // compared yet (its peer's, the previous rank's, the pending ones); a mismatch drains `message`.
  absl::Status CheckArrivedStamps(PeerMessage& message) const;

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

// Note [Ring stamp]: the operations of one transport whose previous rank's ring stamp had not
// arrived when they finished, oldest first. Used by one operation at a time (the communicator's
// queue thread); the transport must outlive it.
class RingStamps {
 public:
  // `close_timeout`: how long the destructor waits for the stamps still on their way.
  RingStamps(Transport& transport, absl::Duration close_timeout);
  // Waits for the pending stamps (they are on their way from ranks that reached the same calls)
  // and compares them; one that does not come within the close timeout, or differs, aborts the
  // transport (logged: nobody is left to return it to).
  ~RingStamps();
  RingStamps(const RingStamps&) = delete;
  RingStamps& operator=(const RingStamps&) = delete;

  // Compares the pending stamps that have arrived, oldest first; never waits. A mismatch (or a
  // failed stamp receive) is the error, with the transport aborted.
  absl::Status CheckArrived();
  // Keeps `agreement` until its previous rank's stamp arrives; with kMaxPendingRingStamps kept
  // already, first waits for the oldest until `deadline`.
  absl::Status Keep(std::shared_ptr<PeerAgreement> agreement, const Deadline& deadline);
  size_t pending() const { return pending_.size(); }

 private:
  // Compares the oldest pending stamp, which arrived or failed, and drops it.
  absl::Status CheckOldest(const Deadline& deadline);

  Transport& transport_;
  const absl::Duration close_timeout_;
  std::deque<std::shared_ptr<PeerAgreement>> pending_;
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
