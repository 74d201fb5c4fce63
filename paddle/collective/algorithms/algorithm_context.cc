// AlgorithmContext, PeerMessage and MessageWindow; see algorithm_context.h for the notes on tags
// and errors.
#include "paddle/collective/algorithms/algorithm_context.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

// How long an abandoned request may take to fail after the transport was aborted. Abort fails
// every pending request at once, so this only bounds a broken transport.
constexpr absl::Duration kDrainTimeout = absl::Seconds(30);

}  // namespace

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

AlgorithmContext AlgorithmContext::AfterSteps(uint32_t steps) const {
  AlgorithmContext next = *this;
  next.first_step_ += steps;
  return next;
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
  message.request_ = is_send ? channel.Send(data, bytes, tag) : channel.Recv(data, bytes, tag);
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
  absl::Status s = message.request_->Wait(deadline_);
  if (s.ok()) {
    message.request_.reset();
    return s;
  }
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
  const std::string what = absl::StrCat(
      message.what_, " step ", message.step_, ": ", message.is_send_ ? "sending " : "receiving ",
      message.bytes_, " bytes ", message.is_send_ ? "to" : "from", " rank ", peer);
  absl::Status error = Describe()
                           .Peer(peer, transport_->channel(peer).peer_address())
                           .Bytes(static_cast<int64_t>(message.bytes_))
                           .Waited(deadline_.Elapsed(), deadline_.timeout())
                           .Hint(hint)
                           .Wrap(Annotate(s, what));
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
