// TcpSocket: deadline-bounded blocking operations on a non-blocking socket, for connection setup.
#include "paddle/collective/transport/tcp/tcp_socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace paddle {

namespace {

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status PollFor(int fd, short events, const Deadline& deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, deadline.PollTimeoutMillis());
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return deadline.TimeoutError(what);
    if (errno != EINTR)
      return absl::InternalError(absl::StrCat(what, ": poll: ", ErrnoText(errno)));
  }
}

// Connection errors that a later attempt may not meet: the listener is not up yet or its backlog
// is full, the route or peer is briefly unreachable, or the connection was reset on the way.
bool IsRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN || err == EINTR;
}

}  // namespace

TcpSocket& TcpSocket::operator=(TcpSocket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void TcpSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void TcpSocket::Shutdown() const {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

void TcpSocket::ShutdownWrite() const {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

absl::StatusOr<TcpSocket> TcpSocket::Listen(const SocketAddress& address, int backlog) {
  TcpSocket sock(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(
        absl::StrCat("socket() for ", address.ToString(), ": ", ErrnoText(errno)));
  }
  if (bind(sock.fd(), address.addr(), address.size()) != 0) {
    int err = errno;
    return absl::UnavailableError(absl::StrCat("cannot bind a listening socket to ",
                                               address.ToString(), ": ", ErrnoText(err)));
  }
  if (listen(sock.fd(), backlog) != 0) {
    return absl::InternalError(
        absl::StrCat("listen() on ", address.ToString(), ": ", ErrnoText(errno)));
  }
  return sock;
}

absl::StatusOr<TcpSocket> TcpSocket::Connect(const SocketAddress& address,
                                             const Deadline& deadline) {
  TcpSocket sock(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(absl::StrCat("socket(): ", ErrnoText(errno)));
  }
  int rc = connect(sock.fd(), address.addr(), address.size());
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    std::string text = absl::StrCat("connect to ", address.ToString(), ": ", ErrnoText(err));
    return IsRetryableConnectError(err) ? absl::UnavailableError(text) : absl::InternalError(text);
  }
  if (rc != 0) {
    absl::Status ready = PollFor(sock.fd(), POLLOUT, deadline, "connect");
    if (!ready.ok()) {
      return absl::UnavailableError(
          absl::StrCat("connect to ", address.ToString(), ": ", ready.message()));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      std::string text = absl::StrCat("connect to ", address.ToString(), ": ", ErrnoText(err));
      return IsRetryableConnectError(err) ? absl::UnavailableError(text)
                                          : absl::InternalError(text);
    }
  }
  return sock;
}

absl::StatusOr<TcpSocket> TcpSocket::Accept(const Deadline& deadline, SocketAddress* peer) const {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      *peer = SocketAddress(reinterpret_cast<sockaddr*>(&addr), len);
      return TcpSocket(fd);
    }
    int err = errno;
    // A connection that died in the backlog, or a transient shortage: wait for the next one.
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED ||
        err == EPROTO) {
      absl::Status ready = PollFor(fd_, POLLIN, deadline, "accept");
      if (!ready.ok()) return ready;
      continue;
    }
    return absl::InternalError(absl::StrCat("accept(): ", ErrnoText(err)));
  }
}

absl::Status TcpSocket::SendAll(const void* data, size_t bytes, const Deadline& deadline) const {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd_, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      absl::Status ready = PollFor(fd_, POLLOUT, deadline, "send");
      if (!ready.ok()) return ready;
      continue;
    }
    return absl::UnavailableError(absl::StrCat("send: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::Status TcpSocket::RecvAll(void* data, size_t bytes, const Deadline& deadline) const {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = recv(fd_, p + got, bytes - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("connection closed by the peer after ", got, " of ", bytes, " bytes"));
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      absl::Status ready = PollFor(fd_, POLLIN, deadline, "recv");
      if (!ready.ok()) return ready;
      continue;
    }
    return absl::UnavailableError(absl::StrCat("recv: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SocketAddress> TcpSocket::LocalAddress() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname: ", ErrnoText(errno)));
  }
  return SocketAddress(reinterpret_cast<sockaddr*>(&addr), len);
}

// Note [Socket buffers]. Linux grows a connection's buffers by itself (autotuning, up to the
// maximum of net.ipv4.tcp_wmem/tcp_rmem), and setting SO_SNDBUF/SO_RCVBUF switches that off for
// the socket and caps the size at net.core.wmem_max/rmem_max. So a requested size is only ever a
// minimum: applied where the socket has less now, never shrinking it. Whether forcing sizes beats
// autotuning depends on the host; see Note [Busy polling] in tcp_tuning.h for the measurement.
absl::Status TcpSocket::ConfigureForData(int buffer_bytes) const {
  int one = 1;
  if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return absl::InternalError(absl::StrCat("setsockopt(TCP_NODELAY): ", ErrnoText(errno)));
  }
  if (buffer_bytes <= 0) return absl::OkStatus();
  for (int option : {SO_SNDBUF, SO_RCVBUF}) {
    int current = 0;
    socklen_t len = sizeof(current);
    if (getsockopt(fd_, SOL_SOCKET, option, &current, &len) != 0 || current >= buffer_bytes) {
      continue;
    }
    // Best effort: a smaller system maximum only means smaller buffers, not an error.
    setsockopt(fd_, SOL_SOCKET, option, &buffer_bytes, sizeof(buffer_bytes));
  }
  return absl::OkStatus();
}

}  // namespace paddle
