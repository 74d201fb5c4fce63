// AlgorithmContext, PeerMessage and MessageWindow; see algorithm_context.h for the notes on tags
// and errors.
#include "paddle/collective/algorithms/algorithm_context.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

// How long an abandoned request may take to fail after the transport was aborted. Abort fails
// every pending request at once, so this only bounds a broken transport.
constexpr absl::Duration kDrainTimeout = absl::Seconds(30);

// How long a Wait waits for its message before it looks at the stamps that arrived (Note
// [Agreement check], Note [Ring stamp]): far beyond a message's usual latency, short against any
// timeout; and how often it looks again while the message is still on its way.
constexpr absl::Duration kStampSlice = absl::Milliseconds(20);
constexpr absl::Duration kStampPoll = absl::Milliseconds(100);
// Note [Ring stamp]: a Wait that takes this long sends the owed ring stamps and compares those
// that arrived, once, before kStampSlice. Sooner than the look at the peers' stamps, so that a
// rank that moved no data in a call is named in that call by the ring, with both calls, before
// a peer that went on to the next call is found to disagree with it there.
constexpr absl::Duration kRingSlice = absl::Milliseconds(5);

// `theirs`, from `peer`, against `mine` (this rank's stamp for it); a mismatch is logged and
// aborts the transport before the peer's data is used: it is never reduced into a result nor
// forwarded.
absl::Status CompareStamps(Transport& transport, int peer, const CallStamp& mine,
                           const CallStamp& theirs) {
  if (StampsAgree(mine, theirs)) return absl::OkStatus();
  absl::Status error = StampMismatchError(transport.rank(), transport.world_size(), peer,
                                          transport.channel(peer).peer_address(), mine, theirs,
                                          absl::StrCat(transport.name(), " transport"));
  PADDLE_LOG(INFO, COLL) << error;
  transport.Abort(error);
  return error;
}

}  // namespace

// Note [Agreement check]: one operation's stamps on one transport. Each peer gets this rank's
// stamp before the first message sent to it, and its own stamp is received before the first
// message received from it; the receive is posted with that message and waited for (and
// compared) before the message is used.
class PeerAgreement {
 public:
  PeerAgreement(Transport& transport, const CallStamp& stamp, std::vector<int64_t> send_counts,
                std::vector<int64_t> recv_counts, bool ring)
      : transport_(transport),
        ring_(ring && transport.world_size() > 1),
        stamp_(stamp),
        send_counts_(std::move(send_counts)),
        recv_counts_(std::move(recv_counts)),
        peers_(static_cast<size_t>(transport.world_size())) {}
  PeerAgreement(const PeerAgreement&) = delete;
  PeerAgreement& operator=(const PeerAgreement&) = delete;

  // The requests must finish before their buffers go. On success every receive was waited for
  // and the sends left before the operation's own messages; anything else is an error path, where
  // the transport is aborted already or now.
  ~PeerAgreement() {
    for (Peer& p : peers_) {
      if (p.send != nullptr && !p.send->IsCompleted())
        (void)p.send->Wait(Deadline::After(kDrainTimeout));
      for (std::unique_ptr<TransportRequest>* request : {&p.send, &p.recv}) {
        if (*request == nullptr || (*request)->IsCompleted()) continue;
        transport_.Abort(absl::AbortedError(
            "an agreement stamp (Note [Agreement check]) was abandoned because the operation "
            "failed"));
        const absl::Status s = (*request)->Wait(Deadline::After(kDrainTimeout));
        PADDLE_CHECK((*request)->IsCompleted())
            << "the " << transport_.name() << " transport left a request pending "
            << absl::FormatDuration(kDrainTimeout) << " after Abort (" << s << ")";
      }
    }
  }

  const CallStamp& stamp() const { return stamp_; }

  // The stamp for `peer`: alltoallv's pair counts filled in.
  CallStamp StampFor(int peer) const {
    CallStamp stamp = stamp_;
    if (!send_counts_.empty()) {
      stamp.send_count = send_counts_[static_cast<size_t>(peer)];
      stamp.recv_count = recv_counts_[static_cast<size_t>(peer)];
    }
    return stamp;
  }

  // Sends `data` to `peer`, preceded by this rank's stamp if it is the first message to that
  // peer in the operation; both leave together where the transport can (Channel::SendPair).
  std::unique_ptr<TransportRequest> Send(int peer, const void* data, size_t bytes, uint64_t tag) {
    Peer& p = peers_[static_cast<size_t>(peer)];
    Channel& channel = transport_.channel(peer);
    if (p.sent) return channel.Send(data, bytes, tag);
    p.sent = true;
    p.out = StampFor(peer);
    std::unique_ptr<TransportRequest> request;
    channel.SendPair(&p.out, sizeof(CallStamp), kAgreementTag, data, bytes, tag, &p.send, &request);
    return request;
  }

  // Note [Ring stamp]: its neighbours on the ring.
  int next() const { return (transport_.rank() + 1) % transport_.world_size(); }
  int previous() const {
    return (transport_.rank() + transport_.world_size() - 1) % transport_.world_size();
  }
  // Note [Ring stamp]: true the first time only, and only for an operation on the ring.
  bool BeginRing() {
    if (!ring_ || ring_started_) return false;
    ring_started_ = true;
    return true;
  }
  // The call runs on the node workspace, which compares stamps itself: no ring.
  void SkipRing() { ring_ = false; }

  void BeforeRecv(int peer) {
    Peer& p = peers_[static_cast<size_t>(peer)];
    if (p.posted) return;
    p.posted = true;
    p.recv = transport_.channel(peer).Recv(&p.in, sizeof(CallStamp), kAgreementTag);
  }

  bool Checked(int peer) const { return peers_[static_cast<size_t>(peer)].checked; }
  // Whether `peer`'s stamp is here (or its receive failed) and not yet compared: Receive then
  // returns at once.
  bool Arrived(int peer) const {
    const Peer& p = peers_[static_cast<size_t>(peer)];
    return !p.checked && p.recv != nullptr && p.recv->IsCompleted();
  }

  // Waits for `peer`'s stamp the first time (OK at once after that); `*theirs` is then the stamp
  // to compare, else null. A failed receive is the transport's error.
  absl::Status Receive(int peer, const Deadline& deadline, const CallStamp** theirs) {
    *theirs = nullptr;
    Peer& p = peers_[static_cast<size_t>(peer)];
    if (p.checked) return absl::OkStatus();
    PADDLE_CHECK(p.recv != nullptr) << "no stamp receive posted for rank " << peer;
    RETURN_IF_ERROR(p.recv->Wait(deadline));
    p.recv.reset();
    p.checked = true;
    *theirs = &p.in;
    return absl::OkStatus();
  }

 private:
  struct Peer {
    CallStamp out;
    CallStamp in;
    std::unique_ptr<TransportRequest> send;
    std::unique_ptr<TransportRequest> recv;
    bool sent = false;
    bool posted = false;
    bool checked = false;
  };

  Transport& transport_;
  bool ring_;
  bool ring_started_ = false;
  const CallStamp stamp_;
  const std::vector<int64_t> send_counts_;
  const std::vector<int64_t> recv_counts_;
  std::vector<Peer> peers_;
};

uint64_t AlgorithmTag(uint64_t seq, uint32_t step) {
  PADDLE_CHECK(seq <= kMaxTagSeq) << "sequence number " << seq << " does not fit in a tag";
  PADDLE_CHECK(step < (uint32_t{1} << kTagStepBits)) << "step " << step << " does not fit";
  return (seq << kTagStepBits) | step;
}

// ---- PeerMessage ----

PeerMessage& PeerMessage::operator=(PeerMessage&& other) noexcept {
  if (this != &other) {
    Drain();
    ctx_ = other.ctx_;
    request_ = std::move(other.request_);
    peer_ = other.peer_;
    bytes_ = other.bytes_;
    step_ = other.step_;
    is_send_ = other.is_send_;
    what_ = other.what_;
  }
  return *this;
}

void PeerMessage::Drain() {
  if (request_ == nullptr) return;
  if (!request_->IsCompleted()) {
    // Only reached on an error path: the first error already aborted the transport (first cause
    // wins), so this Abort is a no-op there and the Wait returns at once.
    ctx_->transport().Abort(ctx_->Describe().Peer(peer_).Wrap(absl::AbortedError(
        absl::StrCat(what_, " step ", step_, ": a ", is_send_ ? "send" : "receive",
                     " was abandoned because an earlier step of the operation failed"))));
    const absl::Status s = request_->Wait(Deadline::After(kDrainTimeout));
    PADDLE_CHECK(request_->IsCompleted())
        << "the " << ctx_->transport().name() << " transport left a request pending "
        << absl::FormatDuration(kDrainTimeout) << " after Abort (" << s
        << "); its buffer cannot be freed safely";
  }
  request_.reset();
}

// ---- AlgorithmContext ----

AlgorithmContext::AlgorithmContext(Transport& transport, std::string op_name, uint64_t seq,
                                   Deadline deadline)
    : transport_(&transport),
      rank_(transport.rank()),
      size_(transport.world_size()),
      op_name_(std::move(op_name)),
      seq_(seq),
      deadline_(deadline) {
  PADDLE_CHECK(seq <= kMaxTagSeq) << "sequence number " << seq << " does not fit in a tag";
}

AlgorithmContext& AlgorithmContext::set_piece_bytes(size_t bytes) {
  PADDLE_CHECK(bytes > 0) << "piece size must be at least one byte";
  piece_bytes_ = bytes;
  return *this;
}

uint8_t* ScratchArena::Get(size_t bytes) {
  if (bytes > size_ || data_ == nullptr) {
    data_.reset(new uint8_t[std::max<size_t>(bytes, 1)]);  // default-initialised: not zeroed
    size_ = bytes;
  }
  return data_.get();
}

uint8_t* AlgorithmContext::Scratch(size_t bytes) const {
  if (arena_ == nullptr) arena_ = std::make_shared<ScratchArena>();
  return arena_->Get(bytes);
}

AlgorithmContext& AlgorithmContext::set_scratch_arena(std::shared_ptr<ScratchArena> arena) {
  arena_ = std::move(arena);
  return *this;
}

AlgorithmContext& AlgorithmContext::set_stamp(const CallStamp& stamp,
                                              std::vector<int64_t> send_counts,
                                              std::vector<int64_t> recv_counts) {
  PADDLE_CHECK(send_counts.size() == recv_counts.size() &&
               (send_counts.empty() || send_counts.size() == static_cast<size_t>(size_)))
      << "pair counts need one entry per rank";
  agreement_ = std::make_shared<PeerAgreement>(*transport_, stamp, std::move(send_counts),
                                               std::move(recv_counts), /*ring=*/true);
  return *this;
}

AlgorithmContext& AlgorithmContext::set_ring_stamps(RingStamps* ring_stamps) {
  ring_stamps_ = ring_stamps;
  return *this;
}

const CallStamp* AlgorithmContext::stamp() const {
  return agreement_ != nullptr ? &agreement_->stamp() : nullptr;
}

AlgorithmContext AlgorithmContext::AfterSteps(uint32_t steps) const {
  AlgorithmContext next = *this;
  next.first_step_ += steps;
  return next;
}

AlgorithmContext AlgorithmContext::OnSubset(Transport& subset) const {
  AlgorithmContext sub(subset, op_name_, seq_, deadline_);
  sub.set_piece_bytes(piece_bytes_);
  if (agreement_ != nullptr) {
    // Note [Ring stamp]: the ring is the whole group's, compared by the context that owns it.
    sub.agreement_ =
        std::make_shared<PeerAgreement>(subset, agreement_->stamp(), std::vector<int64_t>{},
                                        std::vector<int64_t>{}, /*ring=*/false);
  }
  return sub;
}

ErrorContext AlgorithmContext::Describe() const {
  ErrorContext context;
  context.Rank(rank_, size_).Op(op_name_, static_cast<int64_t>(seq_));
  return context;
}

PeerMessage AlgorithmContext::Post(int peer, void* data, size_t bytes, uint32_t step,
                                   const char* what, bool is_send) const {
  PeerMessage message;
  message.ctx_ = this;
  message.peer_ = peer;
  message.bytes_ = bytes;
  message.step_ = first_step_ + step;
  message.is_send_ = is_send;
  message.what_ = what;
  if (bytes == 0) return message;
  PADDLE_CHECK(peer >= 0 && peer < size_ && peer != rank_)
      << what << ": rank " << rank_ << "/" << size_ << " cannot message peer " << peer;
  Channel& channel = transport_->channel(peer);
  const uint64_t tag = Tag(step);
  if (agreement_ != nullptr && is_send) {
    // Note [Agreement check]: the stamp goes first on this link.
    message.request_ = agreement_->Send(peer, data, bytes, tag);
  } else {
    // Note [Agreement check]: the peer's stamp is expected first on this link.
    if (agreement_ != nullptr) agreement_->BeforeRecv(peer);
    message.request_ = is_send ? channel.Send(data, bytes, tag) : channel.Recv(data, bytes, tag);
  }
  PADDLE_LOG(TRACE, COLL) << op_name_ << " #" << seq_ << " " << what << " step " << message.step_
                          << ": posted " << (is_send ? "send of " : "receive of ") << bytes
                          << " bytes " << (is_send ? "to" : "from") << " rank " << peer;
  return message;
}

PeerMessage AlgorithmContext::Send(int peer, const void* data, size_t bytes, uint32_t step,
                                   const char* what) const {
  // The transport only reads a send buffer; Post takes one pointer type for both directions.
  return Post(peer, const_cast<void*>(data), bytes, step, what, /*is_send=*/true);
}

PeerMessage AlgorithmContext::Recv(int peer, void* data, size_t bytes, uint32_t step,
                                   const char* what) const {
  return Post(peer, data, bytes, step, what, /*is_send=*/false);
}

absl::Status AlgorithmContext::Wait(PeerMessage& message) const {
  if (message.request_ == nullptr) return absl::OkStatus();
  absl::Status s;
  if (agreement_ != nullptr || ring_stamps_ != nullptr) {
    // Note [Ring stamp]: before this rank may block, its stamp is in the ring.
    s = StartRing(/*waited=*/true);
    if (!s.ok()) {
      message.Drain();
      return s;
    }
    // Note [Agreement check]: a receive's peer stamp left just before its message, so waiting for
    // the message first costs one wake-up for both. A message that takes longer than a slice
    // may be one that never comes (the peer, or the ranks it waits for, are in another call):
    // the owed ring stamps leave, the stamps already here tell, and are looked at again every
    // kStampPoll.
    s = message.request_->Wait(Deadline::After(std::min(kRingSlice, deadline_.Remaining())));
    if (absl::IsDeadlineExceeded(s) && !deadline_.Expired() && ring_stamps_ != nullptr) {
      ring_stamps_->Flush();
      absl::Status ring = ring_stamps_->CheckArrived();
      if (!ring.ok()) {
        message.Drain();
        return ring;
      }
      s = message.request_->Wait(
          Deadline::After(std::min(kStampSlice - kRingSlice, deadline_.Remaining())));
    }
    while (absl::IsDeadlineExceeded(s) && !deadline_.Expired()) {
      if (ring_stamps_ != nullptr) ring_stamps_->Flush();
      RETURN_IF_ERROR(CheckArrivedStamps(message));
      s = message.request_->Wait(Deadline::After(std::min(kStampPoll, deadline_.Remaining())));
    }
    // When the message itself failed (a size mismatch poisons the transport), a stamp that
    // arrived explains why better.
    if (agreement_ != nullptr && !message.is_send_ && !agreement_->Checked(message.peer_)) {
      RETURN_IF_ERROR(CheckPeerStamp(message, s.ok()));
    }
  } else {
    s = message.request_->Wait(deadline_);
  }
  if (s.ok()) {
    message.request_.reset();
    return s;
  }
  return MessageFailed(message, s, "");
}

absl::Status AlgorithmContext::StartRing(bool waited) const {
  if (agreement_ == nullptr || ring_stamps_ == nullptr || !agreement_->BeginRing()) {
    return absl::OkStatus();
  }
  // Note [Ring stamp]: a call that never waited moved no data, so its stamp is all the others
  // can go by; a barrier's ranks wait for each other.
  const bool flush = !waited || agreement_->stamp().kind == static_cast<uint8_t>(OpKind::kBarrier);
  absl::Status s =
      ring_stamps_->Record(agreement_->StampFor(agreement_->next()),
                           agreement_->StampFor(agreement_->previous()), flush, deadline_);
  // A mismatch names both calls already.
  return s.ok() || absl::IsInvalidArgument(s) ? s : Fail(s);
}

absl::Status AlgorithmContext::FinishAgreement() const {
  if (agreement_ == nullptr || ring_stamps_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(StartRing(/*waited=*/false));  // a rank that never waited has not recorded it
  // Stamps that came in during this call (the previous rank's messages of this call follow its
  // batches on the link).
  return ring_stamps_->CheckArrived();
}

void AlgorithmContext::MarkWorkspaceCall() const {
  if (agreement_ != nullptr) agreement_->SkipRing();
}

absl::Status AlgorithmContext::CheckArrivedStamps(PeerMessage& message) const {
  if (agreement_ != nullptr && !message.is_send_ && agreement_->Arrived(message.peer_)) {
    const CallStamp* theirs = nullptr;
    // A failed stamp receive: the transport is poisoned, and the message fails with the cause.
    if (agreement_->Receive(message.peer_, deadline_, &theirs).ok() && theirs != nullptr) {
      absl::Status s =
          CompareStamps(*transport_, message.peer_, agreement_->StampFor(message.peer_), *theirs);
      if (!s.ok()) {
        message.Drain();
        return s;
      }
    }
  }
  if (ring_stamps_ != nullptr) {
    absl::Status s = ring_stamps_->CheckArrived();
    if (!s.ok()) {
      message.Drain();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status AlgorithmContext::CheckPeerStamp(PeerMessage& message, bool message_ok) const {
  const int peer = message.peer_;
  const CallStamp* theirs = nullptr;
  absl::Status s = agreement_->Receive(
      peer, message_ok ? deadline_ : Deadline::After(absl::ZeroDuration()), &theirs);
  if (!s.ok()) {
    // Without its stamp the message's own error stands.
    return message_ok ? MessageFailed(message, s, "its agreement stamp") : absl::OkStatus();
  }
  if (theirs == nullptr) return absl::OkStatus();
  s = CompareStamps(*transport_, peer, agreement_->StampFor(peer), *theirs);
  if (!s.ok()) message.Drain();
  return s;
}

absl::Status AlgorithmContext::MessageFailed(PeerMessage& message, const absl::Status& s,
                                             absl::string_view what) const {
  const int peer = message.peer_;
  std::string hint;
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    hint = absl::StrCat(TimeoutHint(TimeoutKind::kCollective), "; a rank that never reached ",
                        op_name_, " #", seq_,
                        " (or called another collective, or with other sizes) looks the same");
  } else {
    hint =
        "this transport is closed now; the cause above names the rank that failed first, whose "
        "own log has the original error";
  }
  std::string part = absl::StrCat(message.what_, " step ", message.step_, ": ",
                                  message.is_send_ ? "sending " : "receiving ", message.bytes_,
                                  " bytes ", message.is_send_ ? "to" : "from", " rank ", peer);
  if (!what.empty()) absl::StrAppend(&part, " (waiting for ", what, ")");
  absl::Status error = Describe()
                           .Peer(peer, transport_->channel(peer).peer_address())
                           .Bytes(static_cast<int64_t>(message.bytes_))
                           .Waited(deadline_.Elapsed(), deadline_.timeout())
                           .Hint(hint)
                           .Wrap(Annotate(s, part));
  PADDLE_LOG(INFO, COLL) << error;
  // Note [Algorithm errors]: poison the transport, then drain this request (the abort fails it).
  transport_->Abort(error);
  message.Drain();
  return error;
}

absl::Status AlgorithmContext::InvalidArgument(absl::string_view message) const {
  return Describe().Wrap(absl::InvalidArgumentError(message));
}

absl::Status AlgorithmContext::Fail(const absl::Status& status) const {
  absl::Status error = Describe().Waited(deadline_.Elapsed(), deadline_.timeout()).Wrap(status);
  transport_->Abort(error);
  return error;
}

absl::Status AlgorithmContext::CheckBuffer(const void* data, int64_t count, DType dtype) const {
  if (DTypeSize(dtype) == 0) {
    return InvalidArgument(absl::StrCat("invalid dtype value ", static_cast<int>(dtype)));
  }
  if (count < 0) return InvalidArgument(absl::StrCat("negative element count ", count));
  if (count > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(DTypeSize(dtype))) {
    return InvalidArgument(absl::StrCat("element count ", count, " of ", DTypeName(dtype),
                                        " overflows a 64-bit byte count"));
  }
  if (count > 0 && data == nullptr) {
    return InvalidArgument(absl::StrCat("null buffer for ", count, " elements"));
  }
  return absl::OkStatus();
}

absl::Status AlgorithmContext::CheckCounts(absl::Span<const int64_t> counts, DType dtype) const {
  if (counts.size() != static_cast<size_t>(size_)) {
    return InvalidArgument(
        absl::StrCat("expected one count per rank (", size_, "), got ", counts.size()));
  }
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return InvalidArgument(absl::StrCat("negative count ", counts[i], " for rank ", i));
    }
    if (counts[i] > std::numeric_limits<int64_t>::max() - total) {
      return InvalidArgument("the sum of the counts overflows int64");
    }
    total += counts[i];
  }
  if (DTypeSize(dtype) == 0) {
    return InvalidArgument(absl::StrCat("invalid dtype value ", static_cast<int>(dtype)));
  }
  if (total > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(DTypeSize(dtype))) {
    return InvalidArgument(absl::StrCat("total count ", total, " of ", DTypeName(dtype),
                                        " overflows a 64-bit byte count"));
  }
  return absl::OkStatus();
}

absl::Status AlgorithmContext::CheckRoot(int root) const {
  if (root < 0 || root >= size_) {
    return InvalidArgument(absl::StrCat("root rank ", root, " is outside [0, ", size_, ")"));
  }
  return absl::OkStatus();
}

// ---- RingStamps ----

// Note [Ring stamp]: what travels on kRingStampTag, always whole (`count` stamps used).
struct RingStamps::Batch {
  uint32_t count = 0;
  uint32_t reserved = 0;
  CallStamp stamps[kRingBatchStamps];
};

struct RingStamps::Outgoing {
  Batch batch;
  std::unique_ptr<TransportRequest> request;
};

RingStamps::CallScope::CallScope(RingStamps* ring) : ring_(ring) {
  if (ring_ != nullptr) ring_->BeginCall();
}

RingStamps::CallScope::~CallScope() {
  if (ring_ != nullptr) ring_->EndCall();
}

RingStamps::RingStamps(Transport& transport, absl::Duration close_timeout)
    : transport_(transport),
      close_timeout_(close_timeout),
      next_((transport.rank() + 1) % transport.world_size()),
      previous_((transport.rank() + transport.world_size() - 1) % transport.world_size()),
      flusher_([this] { FlusherLoop(); }) {}

RingStamps::~RingStamps() {
  Close().IgnoreError();  // at once if it ran; an error is logged there

  std::lock_guard<std::mutex> lock(mu_);
  // The requests must finish before their buffers go; after an Abort they fail at once.
  std::vector<TransportRequest*> requests;
  for (const auto& out : sends_) requests.push_back(out->request.get());
  requests.push_back(recv_.get());
  for (TransportRequest* request : requests) {
    if (request == nullptr || request->IsCompleted()) continue;
    (void)request->Wait(Deadline::After(kDrainTimeout));
    if (request->IsCompleted()) continue;
    transport_.Abort(absl::AbortedError("a ring stamp (Note [Ring stamp]) was abandoned at close"));
    const absl::Status drained = request->Wait(Deadline::After(kDrainTimeout));
    PADDLE_CHECK(request->IsCompleted())
        << "the " << transport_.name() << " transport left a request pending "
        << absl::FormatDuration(kDrainTimeout) << " after Abort (" << drained << ")";
  }
}

absl::Status RingStamps::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return close_status_;
    stop_ = true;
  }
  wake_.notify_all();
  flusher_.join();

  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  FlushLocked();
  const Deadline deadline = Deadline::After(close_timeout_);
  absl::Status s = CompareLocked();
  bool transport_failed = false;
  while (s.ok() && !expected_.empty()) s = ReceiveLocked(deadline, &transport_failed);
  if (s.ok() && !arrived_.empty()) {
    s = MarkRanksDisagree(
        ErrorContext()
            .Rank(transport_.rank(), transport_.world_size())
            .Peer(previous_, transport_.channel(previous_).peer_address())
            .Wrap(absl::InvalidArgumentError(absl::StrCat(
                "ranks called different collectives (Note [Ring stamp]): rank ", previous_,
                " called ", arrived_.size(), " more, the first ", DescribeStamp(arrived_.front()),
                ", which rank ", transport_.rank(), " never called"))));
  }
  if (!s.ok()) {
    // After another failure the transport is poisoned already and the cause was reported.
    if (!transport_failed && (absl::IsInvalidArgument(s) || absl::IsDeadlineExceeded(s))) {
      PADDLE_LOG(WARN, COLL) << "closing the " << transport_.name() << " transport: " << s;
    } else {
      PADDLE_LOG(INFO, COLL) << "closing the " << transport_.name() << " transport: " << s;
    }
    transport_.Abort(s);
  }
  close_status_ = s;
  return s;
}

void RingStamps::BeginCall() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = true;
}

void RingStamps::EndCall() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
  last_end_ = Clock::now();
  if (!owed_.empty() && !armed_) {
    armed_ = true;
    wake_.notify_one();
  }
}

void RingStamps::FlusherLoop() {
  const auto idle = std::chrono::microseconds(absl::ToInt64Microseconds(kRingIdleFlush));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (owed_.empty()) {
      armed_ = false;
      wake_.wait(lock);
      continue;
    }
    // Armed: one look per kRingIdleFlush while operations keep coming, none once all is sent.
    armed_ = true;
    const Clock::time_point due = last_end_ + idle;
    if (busy_ || Clock::now() < due) {
      wake_.wait_until(lock, busy_ ? Clock::now() + idle : due);
      continue;
    }
    FlushLocked();
  }
}

absl::Status RingStamps::Record(const CallStamp& to_next, const CallStamp& from_previous,
                                bool flush, const Deadline& deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  owed_.push_back(to_next);
  expected_.push_back(from_previous);
  if (flush || owed_.size() >= kRingBatchStamps) FlushLocked();
  RETURN_IF_ERROR(CompareLocked());  // the previous rank's may be here already
  RETURN_IF_ERROR(CheckArrivedLocked());
  while (expected_.size() > kMaxPendingRingStamps) {
    FlushLocked();  // the next rank may be waiting for this rank's in turn
    bool transport_failed = false;
    RETURN_IF_ERROR(ReceiveLocked(deadline, &transport_failed));
  }
  PostReceiveLocked();
  return absl::OkStatus();
}

void RingStamps::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked();
}

void RingStamps::FlushLocked() {
  while (!sends_.empty() && sends_.front()->request->IsCompleted()) sends_.pop_front();
  while (!owed_.empty()) {
    auto out = std::make_unique<Outgoing>();
    const size_t count = std::min(kRingBatchStamps, owed_.size());
    out->batch.count = static_cast<uint32_t>(count);
    std::copy(owed_.begin(), owed_.begin() + static_cast<std::ptrdiff_t>(count), out->batch.stamps);
    owed_.erase(owed_.begin(), owed_.begin() + static_cast<std::ptrdiff_t>(count));
    // A failed send means a poisoned transport, which the operations report.
    out->request = transport_.channel(next_).Send(&out->batch, sizeof(Batch), kRingStampTag);
    sends_.push_back(std::move(out));
  }
}

absl::Status RingStamps::CheckArrived() {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckArrivedLocked();
}

absl::Status RingStamps::CheckArrivedLocked() {
  while (recv_ != nullptr && recv_->IsCompleted()) {
    bool transport_failed = false;
    absl::Status s = ReceiveLocked(Deadline::After(absl::ZeroDuration()), &transport_failed);
    // A failed receive means a poisoned transport: the operations fail with its cause, which
    // says more than a ring receive could.
    if (!s.ok()) return transport_failed ? absl::OkStatus() : s;
  }
  return absl::OkStatus();
}

void RingStamps::PostReceiveLocked() {
  if (recv_ != nullptr || expected_.empty()) return;
  if (in_ == nullptr) in_ = std::make_unique<Batch>();
  recv_ = transport_.channel(previous_).Recv(in_.get(), sizeof(Batch), kRingStampTag);
}

absl::Status RingStamps::ReceiveLocked(const Deadline& deadline, bool* transport_failed) {
  *transport_failed = false;
  PostReceiveLocked();
  if (recv_ == nullptr) return absl::OkStatus();
  absl::Status s = recv_->Wait(deadline);
  if (absl::IsDeadlineExceeded(s) && !recv_->IsCompleted()) {
    absl::Status error = ReceiveError(s);
    transport_.Abort(error);
    return error;
  }
  recv_.reset();
  if (!s.ok()) {
    *transport_failed = true;
    return ReceiveError(s);
  }
  if (in_->count == 0 || in_->count > kRingBatchStamps) {
    absl::Status error = ErrorContext()
                             .Rank(transport_.rank(), transport_.world_size())
                             .Peer(previous_, transport_.channel(previous_).peer_address())
                             .Wrap(absl::DataLossError(absl::StrCat(
                                 "a batch of ring stamps (Note [Ring stamp]) claims ", in_->count,
                                 " stamps; at most ", kRingBatchStamps, " fit")));
    transport_.Abort(error);
    return error;
  }
  arrived_.insert(arrived_.end(), in_->stamps, in_->stamps + in_->count);
  RETURN_IF_ERROR(CompareLocked());
  PostReceiveLocked();
  return absl::OkStatus();
}

absl::Status RingStamps::CompareLocked() {
  while (!expected_.empty() && !arrived_.empty()) {
    const CallStamp mine = expected_.front();
    const CallStamp theirs = arrived_.front();
    expected_.pop_front();
    arrived_.pop_front();
    RETURN_IF_ERROR(CompareStamps(transport_, previous_, mine, theirs));
  }
  return absl::OkStatus();
}

absl::Status RingStamps::ReceiveError(const absl::Status& s) const {
  ErrorContext context;
  context.Rank(transport_.rank(), transport_.world_size())
      .Peer(previous_, transport_.channel(previous_).peer_address());
  std::string what = "waiting for the ring stamps (Note [Ring stamp]) of the previous rank";
  if (!expected_.empty()) {
    const CallStamp& oldest = expected_.front();
    context.Op(OpKindName(static_cast<OpKind>(oldest.kind)), static_cast<int64_t>(oldest.seq));
    absl::StrAppend(&what, " for ", expected_.size(), " calls, the oldest ", DescribeStamp(oldest));
  }
  return context.Wrap(Annotate(s, what));
}

// ---- MessageWindow ----

absl::Status MessageWindow::Add(PeerMessage message) {
  if (!message.pending()) return absl::OkStatus();
  while (messages_.size() >= capacity_ && !messages_.empty()) {
    RETURN_IF_ERROR(ctx_.Wait(messages_.front()));
    messages_.pop_front();
  }
  messages_.push_back(std::move(message));
  return absl::OkStatus();
}

absl::Status MessageWindow::WaitAll() {
  while (!messages_.empty()) {
    RETURN_IF_ERROR(ctx_.Wait(messages_.front()));
    messages_.pop_front();
  }
  return absl::OkStatus();
}

}  // namespace paddle
