// AlgorithmContext, PeerMessage and MessageWindow; see algorithm_context.h for the notes on tags
// and errors.
#include "paddle/collective/algorithms/algorithm_context.h"

#include <algorithm>
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

// How long a receive waits for its message before it looks at the peer's stamp instead (Note
// [Agreement check]): far beyond a message's usual latency, short against any timeout.
constexpr absl::Duration kStampSlice = absl::Milliseconds(20);

}  // namespace

// Note [Agreement check]: one operation's stamps on one transport. Each peer gets this rank's
// stamp before the first message sent to it, and its own stamp is received before the first
// message received from it; the receive is posted with that message and waited for (and
// compared) before the message is used.
class PeerAgreement {
 public:
  PeerAgreement(Transport& transport, const CallStamp& stamp, std::vector<int64_t> send_counts,
                std::vector<int64_t> recv_counts)
      : transport_(transport),
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

  // Whether any stamp left or was expected in this operation.
  bool Touched() const {
    for (const Peer& p : peers_) {
      if (p.sent || p.posted) return true;
    }
    return false;
  }

  // Sends this rank's stamp to `peer` with no message after it (AgreeWithoutData).
  void SendStampOnly(int peer) {
    Peer& p = peers_[static_cast<size_t>(peer)];
    if (p.sent) return;
    p.sent = true;
    p.out = StampFor(peer);
    p.send = transport_.channel(peer).Send(&p.out, sizeof(CallStamp), kAgreementTag);
  }

  void BeforeRecv(int peer) {
    Peer& p = peers_[static_cast<size_t>(peer)];
    if (p.posted) return;
    p.posted = true;
    p.recv = transport_.channel(peer).Recv(&p.in, sizeof(CallStamp), kAgreementTag);
  }

  bool Checked(int peer) const { return peers_[static_cast<size_t>(peer)].checked; }

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
                                               std::move(recv_counts));
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
  if (agreement_ != nullptr) sub.set_stamp(agreement_->stamp());
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
  if (agreement_ != nullptr && !message.is_send_ && !agreement_->Checked(message.peer_)) {
    // Note [Agreement check]: the peer's stamp left just before this message, so waiting for the
    // message first costs one wake-up for both. A peer silent for kStampSlice may be in another
    // call, sending on other tags: its stamp (one tag for all calls) then tells, before the
    // message is waited for again.
    s = message.request_->Wait(Deadline::After(std::min(kStampSlice, deadline_.Remaining())));
    if (absl::IsDeadlineExceeded(s) && !deadline_.Expired()) {
      RETURN_IF_ERROR(CheckPeerStamp(message, /*message_ok=*/true));
      s = message.request_->Wait(deadline_);
    }
    // When the message itself failed (a size mismatch poisons the transport), a stamp that
    // arrived explains why better.
    RETURN_IF_ERROR(CheckPeerStamp(message, s.ok()));
  } else {
    s = message.request_->Wait(deadline_);
  }
  if (s.ok()) {
    message.request_.reset();
    return s;
  }
  return MessageFailed(message, s, "");
}

absl::Status AlgorithmContext::AgreeWithoutData() const {
  if (agreement_ == nullptr || size_ == 1 || agreement_->Touched()) return absl::OkStatus();
  // Every rank of an all-empty call does the same, so the k-th stamp on each link still meets
  // the k-th expected there.
  const int next = (rank_ + 1) % size_;
  const int previous = (rank_ + size_ - 1) % size_;
  agreement_->SendStampOnly(next);
  agreement_->BeforeRecv(previous);
  const CallStamp* theirs = nullptr;
  absl::Status s = agreement_->Receive(previous, deadline_, &theirs);
  if (!s.ok()) {
    return Fail(Annotate(s, absl::StrCat("waiting for the agreement stamp of rank ", previous,
                                         " (this rank moved no data in this call)")));
  }
  const CallStamp mine = agreement_->StampFor(previous);
  if (theirs == nullptr || StampsAgree(mine, *theirs)) return absl::OkStatus();
  absl::Status error =
      StampMismatchError(rank_, size_, previous, transport_->channel(previous).peer_address(), mine,
                         *theirs, absl::StrCat(transport_->name(), " transport"));
  PADDLE_LOG(INFO, COLL) << error;
  transport_->Abort(error);
  return error;
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
  const CallStamp mine = agreement_->StampFor(peer);
  if (StampsAgree(mine, *theirs)) return absl::OkStatus();
  absl::Status error =
      StampMismatchError(rank_, size_, peer, transport_->channel(peer).peer_address(), mine,
                         *theirs, absl::StrCat(transport_->name(), " transport"));
  PADDLE_LOG(INFO, COLL) << error;
  // Poisoned before the peer's data is used: it is never reduced into a result nor forwarded.
  transport_->Abort(error);
  message.Drain();
  return error;
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
