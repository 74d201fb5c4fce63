// ShmChannel, ShmOp and ShmRequest; see Note [Shm channel data path] in shm_channel.h.
#include "paddle/collective/transport/shm/shm_channel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/collective/transport/link_error.h"
#include "paddle/collective/transport/shm/cma.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// A copy that shares nothing with `status`: see Note [Locks and ThreadSanitizer] in
// paddle/collective/transport/tcp/tcp_request.h, which applies here too.
absl::Status CopyStatus(const absl::Status& status) {
  return status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
}

}  // namespace

// ---- ShmOp and ShmRequest ----------------------------------------------------------------------

void ShmOp::Complete(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (completed_.load(std::memory_order_relaxed)) return;
  status_ = CopyStatus(status);
  completed_.store(true, std::memory_order_release);
}

absl::Status ShmOp::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CopyStatus(status_);
}

std::string ShmOp::Describe(const ShmLinkInfo& link) const {
  return absl::StrCat(kind == Kind::kSend ? "send #" : "recv #", seq, " (tag ", tag, ", ", bytes,
                      " bytes) ", kind == Kind::kSend ? "to" : "from", " peer ", link.peer, " (",
                      link.peer_address, ")");
}

absl::Status ShmRequest::Wait(const Deadline& deadline) {
  if (!op_->IsCompleted()) {
    absl::Status waited = owner_->Await(*op_, deadline);
    if (!op_->IsCompleted()) {
      if (!absl::IsDeadlineExceeded(waited)) return waited;
      const ShmLinkInfo& link = *link_;
      return ErrorContext()
          .Rank(link.rank, link.world_size)
          .Peer(link.peer, link.peer_address)
          .Op(op_->kind == ShmOp::Kind::kSend ? "send" : "recv", op_->seq)
          .Bytes(static_cast<int64_t>(op_->bytes))
          .Waited(deadline.Elapsed(), deadline.timeout())
          .Hint(op_->kind == ShmOp::Kind::kSend
                    ? "the peer has not received it; the request stays pending: wait again or "
                      "Abort()"
                    : "the peer has not sent it yet; the request stays pending: wait again or "
                      "Abort()")
          .Wrap(absl::DeadlineExceededError(
              absl::StrCat(op_->Describe(link), " did not complete in time")));
    }
  }
  return op_->status();
}

// ---- ShmChannel --------------------------------------------------------------------------------

ShmChannel::ShmChannel(ShmLinkInfo link, Owner* owner, ShmRing inbound, ShmRing outbound,
                       ShmControl* peer_control, bool peer_reads_cma)
    : link_(std::make_shared<const ShmLinkInfo>(std::move(link))),
      owner_(owner),
      peer_control_(peer_control),
      peer_reads_cma_(peer_reads_cma),
      outbound_(outbound),
      inbound_(inbound),
      inbound_probe_(inbound) {}

std::unique_ptr<TransportRequest> ShmChannel::MakeRequest(std::shared_ptr<ShmOp> op) {
  return std::make_unique<ShmRequest>(std::move(op), link_, owner_->Handle());
}

void ShmChannel::CompleteAll(OpList& done) {
  if (done.empty()) return;
  for (auto& op : done) op->Complete(absl::OkStatus());
  done.clear();
  owner_->WakeLocal();  // a waiter of one of them may be asleep on the doorbell
}

// ---- Sending -----------------------------------------------------------------------------------

std::unique_ptr<TransportRequest> ShmChannel::Send(const void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<ShmOp> op;
  OpList done;
  absl::Status cause;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    const int64_t seq = send_seq_++;
    op = std::make_shared<ShmOp>(ShmOp::Kind::kSend, data, bytes, tag, seq);
    cause = owner_->PoisonCause();
    if (cause.ok() && send_closed_) cause = absl::FailedPreconditionError("the link is closed");
    if (cause.ok()) {
      ShmRecordKind kind = bytes <= kShmEagerMaxBytes ? ShmRecordKind::kEager
                           : peer_reads_cma_          ? ShmRecordKind::kCma
                                                      : ShmRecordKind::kStream;
      error = Enqueue(OutMsg{kind, op, static_cast<uint64_t>(seq)}, &done);
    }
  }
  if (!cause.ok()) op->Complete(Annotate(cause, op->Describe(*link_)));
  if (!error.ok()) owner_->Poison(error);  // fails `op` too, which is queued
  CompleteAll(done);
  return MakeRequest(std::move(op));
}

absl::Status ShmChannel::Enqueue(OutMsg message, OpList* done) {
  queue_.push_back(std::move(message));
  // Only the first in line may be written now: the others wait behind it, in order.
  absl::Status error;
  if (queue_.size() == 1) error = WriteQueued(done);
  queued_.store(!queue_.empty(), std::memory_order_release);
  return error;
}

absl::Status ShmChannel::WriteQueued(OpList* done) {
  // Appends `record` to the outbound ring; false (leaving `error` OK) if there is no room yet.
  absl::Status error;
  auto write = [&](const ShmRecord& record, const void* payload) {
    absl::StatusOr<bool> written = outbound_.TryWrite(record, payload);
    if (!written.ok()) error = CorruptRing(written.status());
    return written.ok() && *written;
  };
  while (!queue_.empty()) {
    OutMsg& m = queue_.front();
    ShmRecord record{};
    record.kind = m.kind;
    bool finished = true;
    if (m.kind == ShmRecordKind::kAck) {
      record.word1 = m.id;
      if (!write(record, nullptr)) break;
    } else if (m.kind == ShmRecordKind::kEager) {
      record.tag = m.op->tag;
      record.size = m.op->bytes;
      record.length = static_cast<uint32_t>(m.op->bytes);
      if (!write(record, m.op->data)) break;
      done->push_back(m.op);
    } else if (m.kind == ShmRecordKind::kCma) {
      record.tag = m.op->tag;
      record.size = m.op->bytes;
      record.word0 = reinterpret_cast<uint64_t>(m.op->data);
      record.word1 = m.id;
      if (!write(record, nullptr)) break;
      awaiting_ack_[m.id] = m.op;
    } else {  // kStream
      record.tag = m.op->tag;
      record.size = m.op->bytes;
      while (m.offset < m.op->bytes) {
        const size_t piece = std::min(kShmStreamPieceBytes, m.op->bytes - m.offset);
        record.length = static_cast<uint32_t>(piece);
        record.word0 = m.offset;
        if (!write(record, m.op->data + m.offset)) break;
        m.offset += piece;
        outbound_.Publish();
        RingDoorbell(peer_control_->doorbell);
      }
      finished = m.offset == m.op->bytes;
      if (!finished) break;
      done->push_back(m.op);
    }
    outbound_.Publish();
    RingDoorbell(peer_control_->doorbell);
    if (finished) queue_.pop_front();
  }
  return error;
}

// ---- Receiving ---------------------------------------------------------------------------------

std::unique_ptr<TransportRequest> ShmChannel::Recv(void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<ShmOp> op;
  OpList done;
  absl::Status cause;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    op = std::make_shared<ShmOp>(ShmOp::Kind::kRecv, data, bytes, tag, recv_seq_++);
    cause = owner_->PoisonCause();
    if (cause.ok() && recv_closed_) cause = absl::FailedPreconditionError("the link is closed");
    if (cause.ok()) {
      auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                             [tag](const std::shared_ptr<Unexpected>& u) { return u->tag == tag; });
      if (it == unexpected_.end()) {
        posted_.push_back(op);
      } else {
        std::shared_ptr<Unexpected> message = std::move(*it);
        unexpected_.erase(it);
        if (message->bytes != bytes) {
          error =
              LinkSizeMismatch(*link_, op->tag, op->seq, op->bytes, absl::StrCat(message->bytes));
        } else if (message->complete) {
          if (bytes > 0) std::memcpy(data, message->data.data.get(), bytes);
          done.push_back(op);
          spare_.GiveBack(std::move(message->data));
        } else {
          // Still streaming in: the rest goes straight into this receive.
          std::memcpy(data, message->data.data.get(), stream_received_);
          stream_op_ = op;
          stream_buffer_.reset();
          spare_.GiveBack(std::move(message->data));
        }
      }
    }
  }
  if (!cause.ok()) op->Complete(Annotate(cause, op->Describe(*link_)));
  if (!error.ok()) {
    op->Complete(error);
    owner_->Poison(error);
  }
  CompleteAll(done);
  return MakeRequest(std::move(op));
}

absl::Status ShmChannel::Progress(bool* completed) {
  OpList done;
  absl::Status error;
  if (queued_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      error = WriteQueued(&done);
      queued_.store(!queue_.empty(), std::memory_order_release);
    }
  }
  if (error.ok() && inbound_probe_.MaybeNonEmpty()) {
    std::unique_lock<std::mutex> lock(recv_mu_, std::try_to_lock);
    if (lock.owns_lock() && !recv_closed_) error = ReadInbound(&done);
  }
  *completed = !done.empty();
  CompleteAll(done);
  return error;
}

absl::Status ShmChannel::ReadInbound(OpList* done) {
  while (true) {
    ShmRecord record;  // Note [Untrusted rings]: the one copy of the header that is used
    const char* payload = nullptr;
    absl::StatusOr<bool> next = inbound_.Next(record, &payload);
    if (!next.ok()) return CorruptRing(next.status());
    if (!*next) return absl::OkStatus();
    absl::Status status = OnRecord(record, payload, done);
    inbound_.Pop(record);
    RingDoorbell(peer_control_->doorbell);  // the peer may wait for the space
    if (!status.ok()) return status;
  }
}

// `record` passed CheckShmRecord (its payload lies in the ring and within its message); here it is
// checked against the receive state and buffers (Note [Untrusted rings]).
absl::Status ShmChannel::OnRecord(const ShmRecord& record, const char* payload, OpList* done) {
  if (record.kind == ShmRecordKind::kAck) {
    std::lock_guard<std::mutex> lock(send_mu_);
    auto it = awaiting_ack_.find(record.word1);
    if (it != awaiting_ack_.end()) {  // else it failed already
      done->push_back(std::move(it->second));
      awaiting_ack_.erase(it);
    }
    return absl::OkStatus();
  }
  const size_t size = record.size;
  const size_t length = record.length;
  const bool streaming = stream_op_ != nullptr || stream_buffer_ != nullptr;
  if (record.kind == ShmRecordKind::kStream && record.word0 > 0) {
    // The next piece of the message streaming in, if its receive has not failed (a size
    // mismatch: the transport is being poisoned).
    if (!streaming) return absl::OkStatus();
    const size_t total = stream_op_ != nullptr ? stream_op_->bytes : stream_buffer_->bytes;
    if (size != total || record.word0 != stream_received_) {
      return CorruptRing(absl::DataLossError(
          absl::StrCat("corrupt shared-memory ring: a stream piece of tag ", record.tag, " for a ",
                       size, "-byte message at offset ", record.word0, " (", length,
                       " bytes), but the message streaming in has ", total, " bytes, ",
                       stream_received_, " of them received")));
    }
    char* into = stream_op_ != nullptr ? stream_op_->data : stream_buffer_->data.data.get();
    std::memcpy(into + stream_received_, payload, length);
    stream_received_ += length;
    if (stream_received_ == size) {
      if (stream_op_ != nullptr) {
        done->push_back(std::move(stream_op_));
      } else {
        stream_buffer_->complete = true;
        stream_buffer_.reset();
      }
    }
    return absl::OkStatus();
  }
  if (streaming) {
    // A sender writes every piece of a streamed message before its next message.
    return CorruptRing(absl::DataLossError(
        absl::StrCat("corrupt shared-memory ring: a message of tag ", record.tag, " (", size,
                     " bytes) starts while a streamed message has ", stream_received_, " of its ",
                     stream_op_ != nullptr ? stream_op_->bytes : stream_buffer_->bytes, " bytes")));
  }
  // The start of a message: the oldest posted receive with its tag takes it.
  const uint64_t tag = record.tag;
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [tag](const std::shared_ptr<ShmOp>& op) { return op->tag == tag; });
  if (it != posted_.end()) {
    std::shared_ptr<ShmOp> op = std::move(*it);
    posted_.erase(it);
    if (op->bytes != size) {
      absl::Status mismatch =
          LinkSizeMismatch(*link_, op->tag, op->seq, op->bytes, absl::StrCat(size));
      op->Complete(mismatch);
      return mismatch;
    }
    if (record.kind == ShmRecordKind::kCma) {
      absl::Status read = ReadCma(*op, record.word0, record.word1);
      if (!read.ok()) {
        op->Complete(read);
        return read;
      }
      done->push_back(std::move(op));
      return absl::OkStatus();
    }
    if (length > 0) std::memcpy(op->data, payload, length);
    if (length == size) {
      done->push_back(std::move(op));
    } else {
      stream_op_ = std::move(op);
      stream_received_ = length;
    }
    return absl::OkStatus();
  }
  auto message = std::make_shared<Unexpected>();
  message->tag = tag;
  message->bytes = size;
  if (record.kind == ShmRecordKind::kCma) {
    // Nobody has asked for it yet: pull it now into a buffer of our own (one extra copy) and
    // release the sender, as the TCP transport buffers unexpected messages. Leaving the sender
    // waiting for a receive would deadlock a rank that waits for its send before it posts its
    // receive (a pattern the TCP transport, with its kernel buffers, has always allowed).
    message->data = spare_.Take(size);
    if (message->data.data == nullptr) {
      return LinkContext(*link_)
          .Bytes(static_cast<int64_t>(size))
          .Hint("post receives before the peer sends, or reduce the message size")
          .Wrap(absl::ResourceExhaustedError(absl::StrCat(
              "out of memory buffering an unexpected message (tag ", tag, ", no Recv posted)")));
    }
    ShmOp staging(ShmOp::Kind::kRecv, message->data.data.get(), size, tag, /*seq=*/-1);
    RETURN_IF_ERROR(ReadCma(staging, record.word0, record.word1));
    message->complete = true;
  } else {
    if (size > 0) {
      message->data = spare_.Take(size);
      if (message->data.data == nullptr) {
        return LinkContext(*link_)
            .Bytes(static_cast<int64_t>(size))
            .Hint("post receives before the peer sends, or reduce the message size")
            .Wrap(absl::ResourceExhaustedError(absl::StrCat(
                "out of memory buffering an unexpected message (tag ", tag, ", no Recv posted)")));
      }
      std::memcpy(message->data.data.get(), payload, length);
    }
    message->complete = length == size;
    if (!message->complete) {
      stream_buffer_ = message;
      stream_received_ = length;
    }
  }
  unexpected_.push_back(std::move(message));
  return absl::OkStatus();
}

absl::Status ShmChannel::ReadCma(ShmOp& op, uint64_t address, uint64_t id) {
  absl::Status read = CmaRead(link_->peer_pid, address, op.data, op.bytes);
  // A sender that aborted may have reused its buffer while it was read: do not trust the bytes.
  // And a read that failed because the sender has exited since (ESRCH) after aborting: its exit
  // is not the news, the cause it left in its control block is.
  if (peer_control_->aborted.load(std::memory_order_acquire) != 0) {
    // Quote the sender's cause: it names the rank that failed first.
    read = absl::UnavailableError(
        absl::StrCat("the sender aborted its transport during the copy: ",
                     absl::string_view(peer_control_->abort_text,
                                       strnlen(peer_control_->abort_text, kShmAbortTextBytes))));
  }
  if (!read.ok()) {
    return LinkContext(*link_)
        .Bytes(static_cast<int64_t>(op.bytes))
        .Hint(absl::StrCat("rank ", link_->peer, " (", link_->peer_address,
                           ") may have exited or been killed (see its log), or set ", kShmCmaEnvVar,
                           "=0 if this kernel forbids cross-memory attach"))
        .Wrap(Annotate(read, absl::StrCat(op.Describe(*link_), ": reading the message with CMA")));
  }
  // Complete before acknowledging: once the sender sees the acknowledgement its Send is done,
  // and whoever learns of that (a barrier, a reply) may look at this receive next.
  op.Complete(absl::OkStatus());
  std::lock_guard<std::mutex> lock(send_mu_);
  OpList none;  // acknowledgements complete nothing here
  return Enqueue(OutMsg{ShmRecordKind::kAck, nullptr, id}, &none);
}

// ---- Failure -----------------------------------------------------------------------------------

void ShmChannel::Fail(const absl::Status& cause) {
  OpList failed;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    send_closed_ = true;
    for (auto& m : queue_) {
      if (m.op != nullptr) failed.push_back(std::move(m.op));
    }
    queue_.clear();
    queued_.store(false, std::memory_order_release);
    for (auto& entry : awaiting_ack_) failed.push_back(std::move(entry.second));
    awaiting_ack_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    recv_closed_ = true;
    for (auto& op : posted_) failed.push_back(std::move(op));
    posted_.clear();
    if (stream_op_ != nullptr) failed.push_back(std::move(stream_op_));
    unexpected_.clear();
    stream_buffer_.reset();
    spare_.clear();
  }
  for (auto& op : failed) op->Complete(Annotate(cause, op->Describe(*link_)));
}

absl::Status ShmChannel::CorruptRing(const absl::Status& status) const {
  return LinkContext(*link_)
      .Hint(absl::StrCat("rank ", link_->peer, " (", link_->peer_address,
                         ") wrote an impossible record or position into shared memory: it is "
                         "broken, of another build, or not a rank of this job"))
      .Wrap(status);
}

}  // namespace paddle
