// One TcpChannel against a peer played by hand over a real loopback socket: the channel's I/O
// loop is held still where a test needs the race that a loaded machine produces by chance, and
// the peer writes raw frames (tcp_wire.h) or misbehaves (resets the link, announces a huge
// message). The channel's owner records the cause it is poisoned with, which is what the
// rank's user reads.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/collective/transport/tcp/tcp_channel.h"
#include "paddle/collective/transport/tcp/tcp_loop.h"
#include "paddle/collective/transport/tcp/tcp_socket.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"
#include "paddle/core/deadline.h"

namespace paddle {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);
// The channel's limit for buffered unexpected messages (Note [Unexpected-message limit]).
constexpr size_t kUnexpectedLimit = 1 << 20;

class RecordingOwner final : public TcpChannel::Owner {
 public:
  void Poison(const absl::Status& cause, int peer) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cause_.ok()) return;
    cause_ = CopyStatus(cause);
    peer_ = peer;
  }
  absl::Status PoisonCause() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return CopyStatus(cause_);
  }
  // The cause, once the loop thread has poisoned (an OK status if it did not within `timeout`).
  absl::Status AwaitCause(absl::Duration timeout) const {
    const absl::Time end = absl::Now() + timeout;
    absl::Status cause = PoisonCause();
    while (cause.ok() && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(5));
      cause = PoisonCause();
    }
    return cause;
  }
  int peer() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peer_;
  }

 private:
  mutable std::mutex mu_;
  absl::Status cause_;
  int peer_ = -1;
};

// Rank 3 of 5 (the channel) linked to rank 4 (the test's raw socket).
class TcpHostilePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SocketAddress> any = SocketAddress::Parse("127.0.0.1:0");
    ASSERT_TRUE(any.ok()) << any.status();
    absl::StatusOr<TcpSocket> listener = TcpSocket::Listen(*any, 1);
    ASSERT_TRUE(listener.ok()) << listener.status();
    absl::StatusOr<SocketAddress> address = listener->LocalAddress();
    ASSERT_TRUE(address.ok()) << address.status();
    absl::StatusOr<TcpSocket> ours = TcpSocket::Connect(*address, Deadline::After(kWait));
    ASSERT_TRUE(ours.ok()) << ours.status();
    SocketAddress from;
    absl::StatusOr<TcpSocket> theirs = listener->Accept(Deadline::After(kWait), &from);
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    peer_ = std::move(*theirs);
    absl::StatusOr<std::unique_ptr<TcpLoop>> loop = TcpLoop::Start(absl::ZeroDuration());
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    auto link = std::make_shared<TcpLinkInfo>();
    link->rank = 3;
    link->world_size = 5;
    link->peer = 4;
    link->peer_address = address->ToString();
    fd_ = ours->fd();
    channel_ = std::make_unique<TcpChannel>(std::move(link), std::move(*ours), loop_.get(), &owner_,
                                            absl::ZeroDuration(), nullptr, kUnexpectedLimit);
  }

  void TearDown() override {
    release_.Notify();
    if (loop_ != nullptr) {
      if (channel_ != nullptr) {
        loop_->Post([this] { channel_->Fail(absl::CancelledError("test over")); });
      }
      loop_->Stop();
    }
    requests_.clear();
    channel_.reset();
  }

  // Keeps the loop thread busy until TearDown: nothing reads the socket but the test's calls.
  void HoldLoop() {
    absl::Notification held;
    loop_->Post([this, &held] {
      held.Notify();
      release_.WaitForNotification();
    });
    held.WaitForNotification();
  }

  // Waits until the channel's socket reports `events` (nobody else reads it).
  bool WaitForSocket(short events) {
    pollfd p{fd_, events, 0};
    return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kWait))) == 1;
  }

  void PeerWrites(const void* data, size_t bytes) {
    ASSERT_TRUE(peer_.SendAll(data, bytes, Deadline::After(kWait)).ok());
  }

  void PeerWritesFrame(const tcp_wire::MessageHeader& header, const std::string& payload) {
    char encoded[tcp_wire::kMessageHeaderBytes];
    tcp_wire::EncodeMessageHeader(header, encoded);
    PeerWrites(encoded, sizeof(encoded));
    if (!payload.empty()) PeerWrites(payload.data(), payload.size());
  }

  RecordingOwner owner_;
  std::unique_ptr<TcpLoop> loop_;
  std::unique_ptr<TcpChannel> channel_;
  TcpSocket peer_;
  int fd_ = -1;
  absl::Notification release_;
  std::vector<std::unique_ptr<TransportRequest>> requests_;
};

// Note [Read before blaming]: rank 4 aborts because rank 2 died, sends its abort frame and closes
// with our message still unread, so its kernel resets the link. Our next send fails before the
// loop has read the frame; the cause must still be rank 4's report naming rank 2, not the send
// error naming rank 4.
TEST_F(TcpHostilePeerTest, SendAfterResetNamesTheCauseInTheAbortFrame) {
  HoldLoop();
  ASSERT_TRUE(channel_->Start().ok());
  std::vector<char> unread(4096, 'x');
  requests_.push_back(channel_->Send(unread.data(), unread.size(), 1));
  pollfd arrived{peer_.fd(), POLLIN, 0};  // our bytes are in the peer's receive queue
  ASSERT_EQ(poll(&arrived, 1, static_cast<int>(absl::ToInt64Milliseconds(kWait))), 1);
  const std::string text = "peer rank 2 (10.0.0.2:1234) closed the connection between messages";
  PeerWritesFrame(
      {static_cast<uint64_t>(absl::StatusCode::kUnavailable), text.size(), tcp_wire::kAbortFlag},
      text);
  ASSERT_TRUE(WaitForSocket(POLLIN));  // the frames are in our receive queue
  peer_.Close();                       // with our 4 KiB unread: a reset, not a FIN
  ASSERT_TRUE(WaitForSocket(POLLERR));

  requests_.push_back(channel_->Send(unread.data(), unread.size(), 2));
  absl::Status cause = owner_.PoisonCause();
  ASSERT_FALSE(cause.ok()) << "the failed send did not poison the transport";
  EXPECT_EQ(owner_.peer(), 4);
  EXPECT_NE(cause.message().find("peer rank 4"), std::string::npos) << cause;
  EXPECT_NE(cause.message().find("aborted its transport"), std::string::npos) << cause;
  EXPECT_NE(cause.message().find("peer rank 2 (10.0.0.2:1234)"), std::string::npos) << cause;
  EXPECT_EQ(cause.message().find("send:"), std::string::npos) << cause;
}

// Note [Lingering close]: our channel fails (rank 3 aborts) while the peer still sends to it and
// has not read what we sent before (its receive window is full, so the abort frame waits in our
// send buffer behind a message). The peer's data must not make our kernel reset the link, which
// would throw the queued frame away: once the peer reads again it gets everything we sent, then
// the abort frame with our cause, then an orderly end of stream.
TEST_F(TcpHostilePeerTest, AbortFrameReachesAPeerThatStillSends) {
  ASSERT_TRUE(channel_->Start().ok());
  const int big = 256 << 10;
  const int small = 8 << 10;
  ASSERT_EQ(setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)), 0);
  ASSERT_EQ(setsockopt(peer_.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  // Whole messages until 64 KiB wait in our kernel for the peer's window (every send completes,
  // so the channel itself holds nothing and the abort frame may go).
  const std::vector<char> piece(16 << 10, 'm');
  size_t sent = 0;
  int unsent = 0;
  for (int i = 0; i < 256 && unsent < (64 << 10); ++i) {
    absl::Status s = channel_->Send(piece.data(), piece.size(), 1)->Wait(Deadline::After(kWait));
    ASSERT_TRUE(s.ok()) << s;
    sent += tcp_wire::kMessageHeaderBytes + piece.size();
    absl::SleepFor(absl::Milliseconds(2));
    ASSERT_EQ(ioctl(fd_, TIOCOUTQ, &unsent), 0);
  }
  ASSERT_GE(unsent, 64 << 10) << "the peer's window never filled";

  const std::string cause = "rank 3 gives up (test abort)";
  // std::promise, not absl::Notification: Debian's Abseil is not built for TSan, which then
  // cannot see that the loop thread is done with channel_ before channel_.reset() below.
  std::promise<void> failed;
  loop_->Post([&] {
    channel_->Fail(absl::AbortedError(cause));
    failed.set_value();
  });
  failed.get_future().wait();
  const std::vector<char> late(4096, 'p');
  PeerWrites(late.data(), late.size());  // on its way as we close

  std::string got;
  int read_error = 0;
  std::thread reader([&] {
    absl::SleepFor(absl::Milliseconds(100));  // a peer busy elsewhere for a moment
    std::vector<char> buffer(1 << 16);
    while (true) {
      const ssize_t n = recv(peer_.fd(), buffer.data(), buffer.size(), 0);
      if (n > 0) {
        got.append(buffer.data(), static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {  // the socket is non-blocking
        pollfd more{peer_.fd(), POLLIN, 0};
        if (poll(&more, 1, static_cast<int>(absl::ToInt64Milliseconds(kWait))) != 1) {
          read_error = ETIMEDOUT;
          return;
        }
      } else {
        read_error = n < 0 ? errno : 0;
        return;
      }
    }
  });
  channel_.reset();  // closes the socket
  reader.join();

  EXPECT_EQ(read_error, 0) << "the peer's read failed: " << std::strerror(read_error);
  ASSERT_EQ(got.size(), sent + tcp_wire::kMessageHeaderBytes + cause.size())
      << "the peer got " << got.size() << " of the " << sent << " bytes of messages and the "
      << tcp_wire::kMessageHeaderBytes + cause.size() << " of the abort frame";
  tcp_wire::MessageHeader header;
  ASSERT_TRUE(tcp_wire::DecodeMessageHeader(got.data() + sent, &header).ok());
  EXPECT_EQ(header.flags, tcp_wire::kAbortFlag);
  EXPECT_EQ(got.substr(sent + tcp_wire::kMessageHeaderBytes), cause);
}

// Without an abort frame the write error stays the cause, naming the peer and errno.
TEST_F(TcpHostilePeerTest, SendAfterResetWithoutAbortFrameReportsTheSendError) {
  HoldLoop();
  ASSERT_TRUE(channel_->Start().ok());
  std::vector<char> unread(4096, 'x');
  requests_.push_back(channel_->Send(unread.data(), unread.size(), 1));
  pollfd arrived{peer_.fd(), POLLIN, 0};  // our bytes are in the peer's receive queue
  ASSERT_EQ(poll(&arrived, 1, static_cast<int>(absl::ToInt64Milliseconds(kWait))), 1);
  peer_.Close();
  ASSERT_TRUE(WaitForSocket(POLLERR));
  requests_.push_back(channel_->Send(unread.data(), unread.size(), 2));
  absl::Status cause = owner_.PoisonCause();
  ASSERT_FALSE(cause.ok());
  EXPECT_TRUE(absl::IsUnavailable(cause)) << cause;
  EXPECT_NE(cause.message().find("peer rank 4"), std::string::npos) << cause;
  EXPECT_NE(cause.message().find("send"), std::string::npos) << cause;
}

// Note [Unexpected-message limit]: a header announcing 8 GiB that no Recv expects is refused
// before any allocation, naming the peer, the tag and the size.
TEST_F(TcpHostilePeerTest, HugeUnexpectedMessageIsRefusedBeforeAllocating) {
  ASSERT_TRUE(channel_->Start().ok());
  PeerWritesFrame({9, uint64_t{8} << 30, 0}, "");
  absl::Status cause = owner_.AwaitCause(kWait);
  ASSERT_FALSE(cause.ok()) << "the channel took an 8 GiB unexpected message";
  EXPECT_TRUE(absl::IsResourceExhausted(cause)) << cause;
  EXPECT_EQ(owner_.peer(), 4);
  for (const std::string part :
       {"rank 3/5", "peer rank 4", "8589934592 bytes (tag 9)", "PADDLE_TCP_MAX_UNEXPECTED_MB"}) {
    EXPECT_NE(cause.message().find(part), std::string::npos) << part << " not in " << cause;
  }
}

// The limit counts what the link already buffers: two messages under it alone, over it together.
// The first stays receivable until the second arrives.
TEST_F(TcpHostilePeerTest, UnexpectedMessagesAreLimitedTogether) {
  ASSERT_TRUE(channel_->Start().ok());
  const std::string payload(600 << 10, 'p');
  PeerWritesFrame({1, payload.size(), 0}, payload);
  PeerWritesFrame({2, payload.size(), 0}, "");  // its header is enough
  absl::Status cause = owner_.AwaitCause(kWait);
  ASSERT_FALSE(cause.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(cause)) << cause;
  EXPECT_NE(cause.message().find("(tag 2)"), std::string::npos) << cause;
  EXPECT_NE(cause.message().find("614400 bytes already buffered"), std::string::npos) << cause;
}

// Under the limit, an unexpected message is buffered and a later Recv gets it intact.
TEST_F(TcpHostilePeerTest, UnexpectedMessageUnderTheLimitIsDelivered) {
  ASSERT_TRUE(channel_->Start().ok());
  const std::string payload(600 << 10, 'q');
  PeerWritesFrame({5, payload.size(), 0}, payload);
  absl::SleepFor(absl::Milliseconds(50));  // let it arrive before the receive (not required)
  std::string got(payload.size(), '\0');
  std::unique_ptr<TransportRequest> recv = channel_->Recv(got.data(), got.size(), 5);
  absl::Status done = recv->Wait(Deadline::After(kWait));
  ASSERT_TRUE(done.ok()) << done;
  EXPECT_EQ(got, payload);
  EXPECT_TRUE(owner_.PoisonCause().ok()) << owner_.PoisonCause();
}

}  // namespace
}  // namespace paddle
