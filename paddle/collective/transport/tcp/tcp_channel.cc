// TcpChannel: message framing and matching on one peer's socket; see Note [TCP channel data
// path] in tcp_channel.h. Failing and closing the channel are in tcp_channel_close.cc.
#include "paddle/collective/transport/tcp/tcp_channel.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

constexpr size_t kHeaderBytes = tcp_wire::kMessageHeaderBytes;
// Payload remainders at least this large are read straight into their destination; smaller ones
// go through the staging buffer, where the copy is cheaper than a read() of their own.
constexpr size_t kDirectReadMinBytes = 8 << 10;
// Bytes read from one socket per loop turn before the other sockets get their turn.
constexpr size_t kReadBudgetBytes = 8 << 20;
// Note [Receive low-water mark].
constexpr size_t kMaxLowWaterBytes = 256 << 10;
// iovec entries per sendmsg: a batch of up to 32 queued messages (header and payload each).
constexpr int kMaxSendVectors = 64;
// Abort frames are read through the staging buffer.
static_assert(tcp_wire::kMaxAbortBytes < kDirectReadMinBytes, "abort frames must be staged");

using OpList = std::vector<std::shared_ptr<TcpOp>>;

void CompleteAll(OpList& ops) {
  for (auto& op : ops) op->Complete(absl::OkStatus());
  ops.clear();
}

}  // namespace

TcpChannel::TcpChannel(std::shared_ptr<const TcpLinkInfo> link, TcpSocket socket, TcpLoop* loop,
                       Owner* owner, absl::Duration wait_spin,
                       std::shared_ptr<TcpProgress> progress, size_t max_unexpected_bytes)
    : link_(std::move(link)),
      socket_(std::move(socket)),
      loop_(loop),
      owner_(owner),
      wait_spin_(wait_spin),
      max_unexpected_bytes_(max_unexpected_bytes),
      progress_(std::move(progress)),
      staging_(new char[kStagingBytes]) {
  std::lock_guard<std::mutex> lock(reader_->mu);
  reader_->channel = this;
}

TcpChannel::~TcpChannel() {
  Linger(Deadline::After(kAbortLinger));
  // Waits for a waiter that still reads (the transport failed this channel first, which woke it).
  std::lock_guard<std::mutex> lock(reader_->mu);
  reader_->channel = nullptr;
}

absl::Status TcpChannel::Start() { return loop_->Add(socket_.fd(), this); }

bool TcpChannel::LinkDown() const {
  pollfd p{socket_.fd(), POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

std::unique_ptr<TransportRequest> TcpChannel::MakeRequest(std::shared_ptr<TcpOp> op) const {
  std::shared_ptr<TcpProgress> progress = op->IsCompleted() ? nullptr : progress_;
  return std::make_unique<TcpRequest>(std::move(op), link_, wait_spin_, std::move(progress));
}

// ---- Sending ---------------------------------------------------------------------------------

std::unique_ptr<TransportRequest> TcpChannel::Send(const void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<TcpOp> op;
  SendMessages(&data, &bytes, &tag, 1, &op);
  return MakeRequest(std::move(op));
}

void TcpChannel::SendPair(const void* first, size_t first_bytes, uint64_t first_tag,
                          const void* second, size_t second_bytes, uint64_t second_tag,
                          std::unique_ptr<TransportRequest>* first_request,
                          std::unique_ptr<TransportRequest>* second_request) {
  const void* data[2] = {first, second};
  const size_t bytes[2] = {first_bytes, second_bytes};
  const uint64_t tags[2] = {first_tag, second_tag};
  std::shared_ptr<TcpOp> ops[2];
  SendMessages(data, bytes, tags, 2, ops);
  *first_request = MakeRequest(std::move(ops[0]));
  *second_request = MakeRequest(std::move(ops[1]));
}

void TcpChannel::SendMessages(const void* const* data, const size_t* bytes, const uint64_t* tags,
                              int count, std::shared_ptr<TcpOp>* ops) {
  OpList done;
  absl::Status cause;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    for (int i = 0; i < count; ++i) {
      ops[i] = std::make_shared<TcpOp>(TcpOp::Kind::kSend, data[i], bytes[i], tags[i], send_seq_++);
    }
    cause = owner_->PoisonCause();
    if (cause.ok() && send_closed_) {
      std::lock_guard<std::mutex> recv_lock(recv_mu_);
      cause =
          closed_gracefully_ ? close_cause_ : absl::FailedPreconditionError("the link is closed");
    }
    if (cause.ok()) {
      // Write at once from this thread when nothing is queued ahead (the common case): no hand-off
      // to the loop, and small messages leave before Send() returns.
      bool idle = send_queue_.empty();
      for (int i = 0; i < count; ++i) send_queue_.push_back(ops[i]);
      if (idle) error = WriteQueued(&done);
      send_pending_.store(!send_queue_.empty());
    }
  }
  if (!cause.ok()) {
    for (int i = 0; i < count; ++i) ops[i]->Fail(cause, *link_);
  }
  CompleteAll(done);
  if (error.ok() && write_missed_.load()) error = TryWrite();
  if (error.ok() && send_pending_.load()) WatchOutput();
  if (!error.ok()) PoisonAfterSendError(error);
}

// Note [Waiter drives]: the loop never blocks on send_mu_. A thread that finds it taken leaves a
// note (write_missed_) and goes; whoever holds the lock checks the note after letting go and writes
// again, so an output edge that came while the lock was held is never lost. Holders that do not
// write (Idle, SendCloseFrame) check it too.
absl::Status TcpChannel::TryWrite() {
  write_missed_.store(true);
  while (write_missed_.load()) {
    std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return absl::OkStatus();  // the holder sees write_missed_
    write_missed_.store(false);
    OpList done;
    absl::Status error;
    if (!send_closed_) error = WriteQueued(&done);
    send_pending_.store(!send_queue_.empty());
    lock.unlock();
    CompleteAll(done);
    if (!error.ok()) return error;
  }
  return absl::OkStatus();
}

void TcpChannel::WriteMissed() {
  if (!write_missed_.load()) return;
  absl::Status error = TryWrite();
  if (!error.ok()) PoisonAfterSendError(error);
}

void TcpChannel::WatchOutput() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (parked_ || output_watched_) return;  // Unpark arms it if sends are still queued
  output_watched_ = true;
  loop_->Watch(socket_.fd(), this, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
}

void TcpChannel::Park() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  parked_ = true;
  output_watched_ = false;
  loop_->Watch(socket_.fd(), this, 0);  // hang-ups and errors still reach the loop
}

void TcpChannel::Unpark() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  parked_ = false;
  // Re-arming reports what is ready now: input that arrived meanwhile wakes the loop, as it
  // should. Output is watched only while sends are queued, since a writable socket would wake
  // the loop at once for nothing. A Send that queues after this reads parked_ false and arms it.
  output_watched_ = send_pending_.load();
  loop_->Watch(socket_.fd(), this,
               EPOLLIN | EPOLLRDHUP | EPOLLET | (output_watched_ ? EPOLLOUT : 0u));
}

void TcpChannel::ReadHeld() {
  // Note [No read-ahead for waiters]: a message whose bytes all came with the last read may sit
  // in the staging buffer with none left in the kernel to raise an input edge.
  if (staged_held_.exchange(false)) (void)OnEvents(0);
}

absl::Status TcpChannel::WriteQueued(OpList* done) {
  while (!send_queue_.empty()) {
    iovec iov[kMaxSendVectors];
    int count = 0;
    for (const auto& op : send_queue_) {
      if (count + 2 > kMaxSendVectors) break;
      uint64_t written = op->progress.load(std::memory_order_relaxed);
      if (written < kHeaderBytes) {
        iov[count++] = {op->header + written, kHeaderBytes - written};
      }
      size_t payload_written = written > kHeaderBytes ? written - kHeaderBytes : 0;
      if (payload_written < op->bytes) {
        iov[count++] = {op->data + payload_written, op->bytes - payload_written};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t n = sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return IoError("send", errno);
    }
    // Advance the queue by the bytes written, retiring the messages sent in full.
    size_t left = static_cast<size_t>(n);
    while (!send_queue_.empty()) {
      TcpOp& op = *send_queue_.front();
      uint64_t total = kHeaderBytes + op.bytes;
      uint64_t written = op.progress.load(std::memory_order_relaxed);
      uint64_t take = std::min<uint64_t>(left, total - written);
      written += take;
      left -= take;
      op.progress.store(written, std::memory_order_relaxed);
      if (written < total) break;
      done->push_back(std::move(send_queue_.front()));
      send_queue_.pop_front();
    }
  }
  return absl::OkStatus();
}

// ---- Receiving: the caller's side --------------------------------------------------------------

std::unique_ptr<TransportRequest> TcpChannel::Recv(void* data, size_t bytes, uint64_t tag) {
  std::shared_ptr<TcpOp> op;
  std::shared_ptr<Unexpected> arrived;  // a complete unexpected message to copy from
  absl::Status cause;
  absl::Status mismatch;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    op = std::make_shared<TcpOp>(TcpOp::Kind::kRecv, data, bytes, tag, recv_seq_++);
    cause = owner_->PoisonCause();
    if (cause.ok() && recv_closed_ && !closed_gracefully_) {
      cause = absl::FailedPreconditionError("the link is closed");
    }
    if (cause.ok()) {
      auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                             [tag](const std::shared_ptr<Unexpected>& u) { return u->tag == tag; });
      if (it == unexpected_.end() && recv_closed_) {
        // Note [Graceful close] in tcp_channel_close.cc: nothing more will come.
        cause = close_cause_;
      } else if (it == unexpected_.end()) {
        posted_.push_back(op);
      } else {
        std::shared_ptr<Unexpected> message = std::move(*it);
        unexpected_.erase(it);
        if (message->bytes != bytes) {
          mismatch = SizeMismatch(*op, message->bytes);
        } else if (message->complete) {
          arrived = std::move(message);
        } else {
          message->claimed_by = op;  // the loop moves it into `data` as it arrives
        }
      }
    }
  }
  if (!cause.ok()) {
    op->Fail(cause, *link_);
  } else if (!mismatch.ok()) {
    op->Complete(mismatch);
    owner_->Poison(mismatch, link_->peer);
  } else if (arrived != nullptr) {
    // The copy runs on the caller's thread, outside the lock: the message is ours alone now.
    if (bytes > 0) std::memcpy(data, arrived->data.data.get(), bytes);
    Recycle(*arrived);
    op->progress.store(bytes, std::memory_order_relaxed);
    op->Complete(absl::OkStatus());
  }
  return MakeRequest(std::move(op));
}

// ---- Receiving: the loop's side ----------------------------------------------------------------

bool TcpChannel::OnEvents(uint32_t events) {
  if (io_closed_) return false;
  absl::Status error;
  bool more = false;
  if (events == 0 || (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    // Note [Waiter drives]: `missed` first, so a holder that releases after our try_lock fails
    // sees it.
    reader_->missed.store(true);
    std::unique_lock<std::mutex> reader(reader_->mu, std::try_to_lock);
    if (reader.owns_lock()) {
      reader_->missed.store(false);
      more = ReadAvailable(&error);
    }
  }
  if (!error.ok()) {
    owner_->Poison(error, link_->peer);
    return false;
  }
  if ((events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) error = TryWrite();
  if (!error.ok()) {
    PoisonAfterSendError(error);
    return false;
  }
  return more;
}

void TcpChannel::ReadMissed(TcpReaderHook& hook) {
  while (hook.missed.load()) {
    std::unique_lock<std::mutex> reader(hook.mu, std::try_to_lock);
    // Another holder checks `missed` itself once it lets go.
    if (!reader.owns_lock() || hook.channel == nullptr) return;
    TcpChannel& channel = *hook.channel;
    hook.missed.store(false);
    absl::Status error;
    while (channel.ReadAvailable(&error)) {
    }
    if (!error.ok()) {
      channel.owner_->Poison(error, channel.link_->peer);
      return;
    }
  }
}

// Note [No read-ahead for waiters]
// A thread driving the transport for its own op (Note [Waiter drives] in tcp_progress.h) stops
// reading a socket once that op is complete and nothing posted is due on it, and leaves a message
// no Recv is posted for in the kernel (or, if its header came with the last read, in the staging
// buffer). A message for a receive already posted (the data behind the agreement stamp just
// waited for, the next piece of a pipeline) is still read on, straight into its buffer. Reading on
// would buffer the peer's next messages as unexpected ones: a fresh buffer each (page faults on new
// memory), a second copy when their Recv comes, and no back-pressure on a sender that runs ahead
// of its receiver by as much as the socket buffers hold. A 2-rank broadcast loop over TCP, whose
// root runs megabytes ahead, spent its time exactly there (figures: docs/performance-notes.md,
// "No read-ahead for waiters"). Left in the kernel, the message is read by the next Wait
// straight into the buffer its Recv posted. Nothing
// is starved: while the waited op is pending, the driver reads everything as before (so two
// ranks that both wait on a send before posting their receives still drain each other), and
// the loop, when it takes the parked socket back, reads all that is there, the staging buffer
// included (ReadHeld: a small message held there whole raises no input edge).
bool TcpChannel::ReadAvailable(absl::Status* error, const TcpOp* waited) {
  size_t budget = kReadBudgetBytes;
  OpList done;
  while (true) {
    iovec iov[2];
    int count = 0;
    std::shared_ptr<Unexpected> prefix;  // what arrived of a message a Recv claimed
    std::shared_ptr<TcpOp> claimant;
    size_t prefix_bytes = 0;
    bool stop = false;  // Note [No read-ahead for waiters], once `waited` is complete
    {
      std::lock_guard<std::mutex> lock(recv_mu_);
      if (recv_closed_ || goodbye_posted_) return false;
      prefix = SwitchToClaimant(&prefix_bytes);
      if (prefix != nullptr) claimant = in_.op;
      bool held = false;
      *error = ConsumeStaged(&done, waited, &held);
      // Reading on is worth it only while what comes next may be for a posted receive.
      stop = waited != nullptr && (held || (in_.op == nullptr && posted_.empty()));
      if (error->ok() && goodbye_) {
        goodbye_posted_ = true;
        close_cause_ = PeerClosedGracefully();
      } else if (error->ok()) {
        count = NextReadVectors(iov);
      }
    }

    // The claimant cannot complete before this copy: its completion, if due, is in `done`.
    if (prefix_bytes > 0) std::memcpy(claimant->data, prefix->data.data.get(), prefix_bytes);
    if (prefix != nullptr) Recycle(*prefix);
    CompleteAll(done);
    if (!error->ok()) return false;
    if (count == 0) {
      // The close frame arrived (count stays 0 only then): fail this channel alone, on the loop.
      absl::Status cause;
      {
        std::lock_guard<std::mutex> lock(recv_mu_);
        cause = close_cause_;
      }
      loop_->Post([this, cause] { Fail(cause, /*graceful=*/true); });
      return false;
    }
    if (stop && waited->IsCompleted()) {
      // Note [No read-ahead for waiters]. Not at EAGAIN, so the low-water mark set for a payload
      // that is now complete must be lowered here, or the next poll would miss a small message.
      SetLowWater();
      staged_held_.store(staged_end_ > 0);
      return false;
    }
    if (budget == 0) return true;

    ssize_t n = readv(socket_.fd(), iov, count);
    if (n > 0) {
      size_t got = static_cast<size_t>(n);
      if (read_into_payload_) {
        size_t into_payload = std::min(got, iov[0].iov_len);
        in_.received += into_payload;
        if (in_.op != nullptr) in_.op->progress.store(in_.received, std::memory_order_relaxed);
        staged_end_ += got - into_payload;
      } else {
        staged_end_ += got;
      }
      budget = got >= budget ? 0 : budget - got;
      continue;
    }
    if (n == 0) {
      *error = PeerClosed();
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *error = IoError("recv", errno);
    } else {
      SetLowWater();
    }
    return false;
  }
}

void TcpChannel::SetLowWater() {
  // Note [Receive low-water mark]. In the middle of a payload, the socket need not report input
  // (nor wake the loop or a waiter in poll) before the rest of it, up to kMaxLowWaterBytes, has
  // arrived: a large message then costs a wake-up per quarter MiB instead of one per arriving
  // segment, and wake-ups are what this transport spends its time on. Between messages it is 1,
  // so a header is seen at once. A FIN or an error is reported whatever the mark.
  int want = 1;
  if (in_.active && in_.bytes > in_.received) {
    want = static_cast<int>(std::min(in_.bytes - in_.received, kMaxLowWaterBytes));
  }
  if (want == low_water_) return;
  if (setsockopt(socket_.fd(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) {
    low_water_ = want;
  }
}

void TcpChannel::Recycle(Unexpected& message) {
  if (message.data.capacity < SpareBuffers::kMinBytes) return;  // not kept: skip the lock
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (!recv_closed_) spare_.GiveBack(std::move(message.data));
}

std::shared_ptr<TcpChannel::Unexpected> TcpChannel::SwitchToClaimant(size_t* arrived) {
  if (!in_.active || in_.unexpected == nullptr || in_.unexpected->claimed_by == nullptr) {
    return nullptr;
  }
  std::shared_ptr<Unexpected> buffer = std::move(in_.unexpected);
  in_.op = std::move(buffer->claimed_by);
  in_.op->progress.store(in_.received, std::memory_order_relaxed);
  *arrived = in_.received;
  return buffer;
}

absl::Status TcpChannel::ConsumeStaged(OpList* done, const TcpOp* waited, bool* held) {
  // Note [No read-ahead for waiters]: whether the driver's op is complete (or about to be).
  auto waited_done = [&] {
    if (waited == nullptr) return false;
    if (waited->IsCompleted()) return true;
    return std::any_of(done->begin(), done->end(),
                       [waited](const std::shared_ptr<TcpOp>& op) { return op.get() == waited; });
  };
  while (true) {
    // A payload read straight into its destination may have just completed.
    if (in_.active && in_.received == in_.bytes) RETURN_IF_ERROR(FinishMessage(done));
    if (goodbye_) break;  // whatever follows the close frame (its abort frame) is not read
    size_t staged = staged_end_ - staged_begin_;
    if (!in_.active) {
      if (staged < kHeaderBytes) break;
      tcp_wire::MessageHeader header;
      absl::Status bad = tcp_wire::DecodeMessageHeader(staging_.get() + staged_begin_, &header);
      if (!bad.ok()) {
        return ErrorContext()
            .Rank(link_->rank, link_->world_size)
            .Peer(link_->peer, link_->peer_address)
            .Wrap(bad);
      }
      if (header.flags == 0 && waited_done() &&
          std::none_of(posted_.begin(), posted_.end(), [&header](const std::shared_ptr<TcpOp>& op) {
            return op->tag == header.tag;
          })) {
        *held = true;  // left staged for its Recv (Note [No read-ahead for waiters])
        break;
      }
      staged_begin_ += kHeaderBytes;
      RETURN_IF_ERROR(StartMessage(header, done));
      continue;
    }
    if (staged == 0) break;
    size_t take = std::min(staged, in_.bytes - in_.received);
    std::memcpy(in_.dest() + in_.received, staging_.get() + staged_begin_, take);
    staged_begin_ += take;
    in_.received += take;
    if (in_.op != nullptr) in_.op->progress.store(in_.received, std::memory_order_relaxed);
  }
  // What is left is part of a header: move it to the front so the next read appends to it.
  size_t staged = staged_end_ - staged_begin_;
  if (staged > 0 && staged_begin_ > 0) {
    std::memmove(staging_.get(), staging_.get() + staged_begin_, staged);
  }
  staged_begin_ = 0;
  staged_end_ = staged;
  return absl::OkStatus();
}

absl::Status TcpChannel::StartMessage(const tcp_wire::MessageHeader& header, OpList* done) {
  const uint64_t tag = header.tag;
  const size_t bytes = header.bytes;
  in_ = Inbound{};
  in_.active = true;
  in_.tag = tag;
  in_.bytes = bytes;
  if (header.flags == tcp_wire::kCloseFlag) {
    in_ = Inbound{};
    goodbye_ = true;
    return absl::OkStatus();
  }
  if (header.flags == tcp_wire::kAbortFlag) {
    in_.abort = true;
    in_.abort_text.resize(bytes);
    return bytes == 0 ? FinishMessage(done) : absl::OkStatus();
  }
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [tag](const std::shared_ptr<TcpOp>& op) { return op->tag == tag; });
  if (it != posted_.end()) {
    in_.op = std::move(*it);
    posted_.erase(it);
    if (in_.op->bytes != bytes) {
      absl::Status mismatch = SizeMismatch(*in_.op, bytes);
      in_.op->Complete(mismatch);
      in_ = Inbound{};
      return mismatch;
    }
  } else {
    absl::Status over = CheckUnexpectedLimit(tag, bytes);
    if (!over.ok()) {
      in_ = Inbound{};
      return over;
    }
    auto message = std::make_shared<Unexpected>();
    message->tag = tag;
    message->bytes = bytes;
    if (bytes > 0) {
      message->data = spare_.Take(bytes);
      if (message->data.data == nullptr) {
        in_ = Inbound{};
        return ErrorContext()
            .Rank(link_->rank, link_->world_size)
            .Peer(link_->peer, link_->peer_address)
            .Bytes(static_cast<int64_t>(bytes))
            .Hint("post receives before the peer sends, or reduce the message size")
            .Wrap(absl::ResourceExhaustedError(absl::StrCat(
                "out of memory buffering an unexpected message (tag ", tag, ", no Recv posted)")));
      }
    }
    unexpected_.push_back(message);
    in_.unexpected = std::move(message);
  }
  return bytes == 0 ? FinishMessage(done) : absl::OkStatus();
}

// Note [Unexpected-message limit]
// A message that arrives before its Recv is buffered at the size its header announces, and a
// header may announce up to tcp_wire::kMaxMessageBytes (1 TiB). A corrupted or hostile peer, or
// one running another program, could so make this rank allocate (and, as the bytes come, touch)
// far more memory than the job ever exchanges. So what one link buffers for unexpected messages,
// this one included, is capped (PADDLE_TCP_MAX_UNEXPECTED_MB, 4 GiB by default); past the cap
// the transport fails with an error naming the peer, the tag and the sizes before allocating.
// A message to a posted Recv is never buffered: its size is checked against the Recv's instead.
absl::Status TcpChannel::CheckUnexpectedLimit(uint64_t tag, size_t bytes) const {
  size_t buffered = 0;  // a handful of entries at most
  for (const auto& message : unexpected_) buffered += message->bytes;
  if (bytes <= max_unexpected_bytes_ && buffered <= max_unexpected_bytes_ - bytes) {
    return absl::OkStatus();
  }
  return ErrorContext()
      .Rank(link_->rank, link_->world_size)
      .Peer(link_->peer, link_->peer_address)
      .Bytes(static_cast<int64_t>(bytes))
      .Hint(absl::StrCat("a peer of another program or a corrupted stream sends such sizes; if "
                         "this job really sends messages this large before their receives are "
                         "posted, raise PADDLE_TCP_MAX_UNEXPECTED_MB (now ",
                         max_unexpected_bytes_ >> 20, ")"))
      .Wrap(absl::ResourceExhaustedError(absl::StrCat(
          "peer rank ", link_->peer, " (", link_->peer_address, ") announced a message of ", bytes,
          " bytes (tag ", tag, ") that no posted receive expects; with the ", buffered,
          " bytes already buffered for this link that is over the limit of ", max_unexpected_bytes_,
          " bytes for unexpected messages")));
}

absl::Status TcpChannel::FinishMessage(OpList* done) {
  absl::Status result;
  if (in_.abort) {
    peer_aborted_ = true;
    result = PeerAborted(in_.tag, in_.abort_text);
  } else if (in_.op != nullptr) {
    done->push_back(std::move(in_.op));
  } else {
    in_.unexpected->complete = true;
  }
  in_ = Inbound{};
  return result;
}

int TcpChannel::NextReadVectors(iovec* iov) {
  // Staged bytes were all consumed, so when a payload is due the staging buffer is empty.
  size_t remaining = in_.active ? in_.bytes - in_.received : 0;
  if (remaining >= kDirectReadMinBytes) {
    read_into_payload_ = true;
    iov[0] = {in_.dest() + in_.received, remaining};
    iov[1] = {staging_.get(), kStagingBytes};
    return 2;
  }
  read_into_payload_ = false;
  iov[0] = {staging_.get() + staged_end_, kStagingBytes - staged_end_};
  return 1;
}

}  // namespace paddle
