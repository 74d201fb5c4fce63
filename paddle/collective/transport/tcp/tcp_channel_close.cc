// TcpChannel's ending: failing a channel (abort frames, Note [Read before blaming]), closing it
// (Note [Lingering close], Note [Graceful close]) and the errors that name the peer. The data
// path is in tcp_channel.cc.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/transport/link_error.h"
#include "paddle/collective/transport/tcp/tcp_channel.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

constexpr size_t kHeaderBytes = tcp_wire::kMessageHeaderBytes;

using OpList = std::vector<std::shared_ptr<TcpOp>>;

}  // namespace

void TcpChannel::Fail(const absl::Status& cause) { Fail(cause, /*graceful=*/false); }

void TcpChannel::Fail(const absl::Status& cause, bool graceful) {
  if (io_closed_) return;
  io_closed_ = true;
  failed_.store(true);
  loop_->Remove(socket_.fd());
  OpList failed;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    send_closed_ = true;
    if (!graceful) SendAbortFrame(cause);  // a leaving peer needs no explanation
    for (auto& op : send_queue_) failed.push_back(std::move(op));
    send_queue_.clear();
  }
  // After the abort frame, which goes out ahead of the FIN. Note [Lingering close]: a peer that
  // still sends meets no reset, which could destroy the frame before the peer read it.
  if (graceful) {
    socket_.Shutdown();
  } else {
    socket_.ShutdownWrite();
  }
  // A driver asleep in poll() holding the reader role must wake (Note [Waiter drives]).
  if (progress_ != nullptr) progress_->Wake();
  std::lock_guard<std::mutex> reader(reader_->mu);
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    recv_closed_ = true;
    for (auto& op : posted_) failed.push_back(std::move(op));
    posted_.clear();
    if (graceful) {
      // Note [Graceful close]: what arrived in full stays receivable.
      closed_gracefully_ = true;
      close_cause_ = cause;
      unexpected_.erase(std::remove_if(unexpected_.begin(), unexpected_.end(),
                                       [](const std::shared_ptr<Unexpected>& u) {
                                         return !u->complete || u->claimed_by != nullptr;
                                       }),
                        unexpected_.end());
    } else {
      unexpected_.clear();
    }
    spare_.clear();
    if (in_.op != nullptr) failed.push_back(std::move(in_.op));
    if (in_.unexpected != nullptr && in_.unexpected->claimed_by != nullptr) {
      failed.push_back(std::move(in_.unexpected->claimed_by));
    }
  }
  in_ = Inbound{};
  staged_begin_ = staged_end_ = 0;
  for (auto& op : failed) op->Fail(cause, *link_);
}

// Note [Read before blaming]
// A rank that aborts sends an abort frame naming the cause (Note [Naming the failed rank] in
// tcp_transport.cc) and then closes; if it closes with unread data in its receive buffer (we were
// still sending to it), its kernel answers with a reset. Our next write then fails with EPIPE or
// ECONNRESET, possibly before our reader has looked at the abort frame, which Linux keeps
// readable in the receive queue after the reset. Blaming the write error would name the peer
// that merely passed the failure on. So a failed write first reads what is readable on that
// socket (as the reader: the loop or a driver may hold the role for a moment, and the broken
// socket wakes a driver asleep in poll()); an abort frame found there is the cause, otherwise
// the write error is.
absl::Status TcpChannel::ExplainSendError(const absl::Status& error) {
  if (failed_.load() || !owner_->PoisonCause().ok()) return error;  // the first cause wins anyway
  absl::Status read_error;
  while (ReadAvailable(&read_error)) {
  }
  return peer_aborted_ && !read_error.ok() ? read_error : error;
}

void TcpChannel::PoisonAfterSendError(const absl::Status& error) {
  absl::Status cause = error;
  if (!failed_.load() && owner_->PoisonCause().ok()) {
    std::lock_guard<std::mutex> reader(reader_->mu);
    cause = ExplainSendError(error);
  }
  owner_->Poison(cause, link_->peer);
}

void TcpChannel::SendAbortFrame(const absl::Status& cause) {
  // Mid-message, the peer expects payload bytes: a frame now would be read as payload.
  if (!send_queue_.empty() && send_queue_.front()->progress.load(std::memory_order_relaxed) > 0) {
    return;
  }
  std::string text(cause.message().substr(0, tcp_wire::kMaxAbortBytes));
  tcp_wire::MessageHeader header{static_cast<uint64_t>(cause.code()), text.size(),
                                 tcp_wire::kAbortFlag};
  char encoded[kHeaderBytes];
  tcp_wire::EncodeMessageHeader(header, encoded);
  iovec iov[2] = {{encoded, kHeaderBytes}, {text.data(), text.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  // A full socket or a dead peer just means the peer learns less; nothing to handle.
  (void)sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Note [Lingering close]
// A failed channel sends its abort frame (Note [Read before blaming]) and then only shuts its
// socket for writing: the frame and a FIN go out, but the socket still receives. Shutting it for
// reading too, or closing it, while the peer still sends (it has not read the frame yet) made
// the kernel answer the peer's data with a reset, and a reset throws away what this side had not
// transmitted yet: when the peer was slow to read (its receive window full), the abort frame was
// still queued here behind earlier data, so the peer read part of a message and then
// "connection reset" instead of the cause. So before the descriptor is closed (the channel's
// destructor; the transport's destructor lingers for all its channels at once), Linger reads
// and drops what arrived and waits until the peer's kernel has taken everything this side sent
// (the frame included; the peer reads it from there even after a reset), for at most the given
// deadline (kAbortLinger): a live peer takes it at once, a stopped one may lose it as before.
void TcpChannel::Linger(const Deadline& deadline) {
  if (!io_closed_ || lingered_) return;
  lingered_ = true;
  const int fd = socket_.fd();
  if (fd < 0) return;
  while (true) {
    int unread = 0;
    if (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0) {
      const ssize_t n = recv(fd, staging_.get(), kStagingBytes, MSG_DONTWAIT);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;  // reset: nothing to save
    }
    int unsent = 0;
    if (ioctl(fd, TIOCOUTQ, &unsent) != 0 || unsent == 0 || deadline.Expired()) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, std::min(deadline.PollTimeoutMillis(), 5)) <= 0) continue;
    if ((p.revents & (POLLERR | POLLHUP)) != 0) break;
    // Readable with nothing to read: the peer's FIN. Nothing more will come, so closing now
    // resets nothing.
    if ((p.revents & POLLIN) != 0 && ioctl(fd, FIONREAD, &unread) == 0 && unread == 0) break;
  }
  socket_.Shutdown();
}

// Note [Graceful close]
// A rank that finished its work destroys its transport while its peers may still be busy with
// each other: with three ranks in a ring allgather, the last rank to receive its final block
// exits while the other two still exchange theirs. Failing the survivors' whole transport then
// (as for a crash) turned a clean exit into an error on ranks that no longer needed the leaver.
// So the destructor of a healthy transport with nothing pending (no send queued, no receive
// posted or being filled: the rank finished its work) first sends a close frame on every link; a
// transport destroyed with requests pending is not a clean leave and aborts as before. A peer
// that reads the frame fails only this channel, and only what it still has pending with the
// leaver: posted receives and queued sends fail with a status naming the leaver (and the
// algorithm that waits on them then aborts the transport as usual; the leaver gets no abort frame
// back, as it is not the one that failed), complete messages that arrived before the frame stay
// receivable, and the other channels go on. A crash, a kill or an Abort sends no close frame (or
// an abort frame first), so those still poison the transport.
bool TcpChannel::Idle() {
  bool sending;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sending = !send_queue_.empty();
  }
  WriteMissed();  // Note [Waiter drives]
  if (sending) return false;
  // The reader role first, then recv_mu_: the order Fail() takes them in.
  std::lock_guard<std::mutex> reader(reader_->mu);
  std::lock_guard<std::mutex> lock(recv_mu_);
  return posted_.empty() && in_.op == nullptr;
}

void TcpChannel::SendCloseFrame() {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_closed_ || !send_queue_.empty()) return;
    tcp_wire::MessageHeader header{0, 0, tcp_wire::kCloseFlag};
    char encoded[kHeaderBytes];
    tcp_wire::EncodeMessageHeader(header, encoded);
    (void)send(socket_.fd(), encoded, kHeaderBytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  WriteMissed();  // Note [Waiter drives]
}

absl::Status TcpChannel::PeerClosedGracefully() const {
  return LinkContext(*link_)
      .Hint(absl::StrCat("rank ", link_->peer,
                         " finished (or destroyed its communicator) while this rank still "
                         "expected to exchange data with it: do all ranks run the same "
                         "collectives?"))
      .Wrap(absl::UnavailableError(absl::StrCat("peer rank ", link_->peer, " (",
                                                link_->peer_address, ") closed its transport")));
}

absl::Status TcpChannel::PeerAborted(uint64_t code, const std::string& text) const {
  // The peer's cause travels as its text. The code says what happened to this rank: the peer is
  // gone (kUnavailable) when it lost a peer itself or was destroyed, else it aborted (kAborted).
  absl::StatusCode local = absl::StatusCode::kAborted;
  if (code == static_cast<uint64_t>(absl::StatusCode::kUnavailable) ||
      code == static_cast<uint64_t>(absl::StatusCode::kCancelled)) {
    local = absl::StatusCode::kUnavailable;
  }
  return absl::Status(local, absl::StrCat("peer rank ", link_->peer, " (", link_->peer_address,
                                          ") aborted its transport: ", text));
}

absl::Status TcpChannel::SizeMismatch(const TcpOp& op, size_t sent_bytes) const {
  return LinkSizeMismatch(*link_, op.tag, op.seq, op.bytes, absl::StrCat(sent_bytes));
}

absl::Status TcpChannel::PeerClosed() const {
  std::string when = in_.active ? absl::StrCat("in the middle of a message (tag ", in_.tag, ", ",
                                               in_.received, " of ", in_.bytes, " bytes arrived)")
                                : std::string("between messages");
  return LinkContext(*link_)
      .Hint(absl::StrCat("rank ", link_->peer,
                         " exited, crashed or aborted its transport; its log says why"))
      .Wrap(absl::UnavailableError(absl::StrCat(
          "peer rank ", link_->peer, " (", link_->peer_address, ") closed the connection ", when)));
}

absl::Status TcpChannel::IoError(const char* what, int err) const {
  return LinkContext(*link_)
      .Hint(absl::StrCat("rank ", link_->peer,
                         " may have crashed or been killed, or the network failed"))
      .Wrap(absl::UnavailableError(absl::StrCat("connection to peer rank ", link_->peer, " (",
                                                link_->peer_address, ") failed: ", what, ": ",
                                                std::strerror(err), " (errno ", err, ")")));
}

}  // namespace paddle
