// TcpSocket: one owned, non-blocking TCP socket and the deadline-bounded blocking operations that
// connection setup needs (listen, connect, accept, send or receive an exact number of bytes).
//
// Setup is the only place the transport blocks on a socket, and each of these calls polls with
// the remaining time of its deadline, so a peer that never answers costs a timeout, not a hang.
// After setup the I/O loop (tcp_loop.h) does its own non-blocking reads and writes on fd().
// Errors carry the operation and errno text; callers add which peer and rank they were talking to.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_SOCKET_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_SOCKET_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/core/deadline.h"

namespace paddle {

class TcpSocket {
 public:
  TcpSocket() = default;
  explicit TcpSocket(int fd) : fd_(fd) {}
  ~TcpSocket() { Close(); }
  TcpSocket(TcpSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  TcpSocket& operator=(TcpSocket&& other) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  // A socket listening on `address` (port 0: an ephemeral port; see LocalAddress()).
  static absl::StatusOr<TcpSocket> Listen(const SocketAddress& address, int backlog);
  // One connection attempt. kUnavailable for errors worth retrying (nobody listening yet, a
  // network briefly unreachable, this attempt's deadline), other codes for the rest.
  static absl::StatusOr<TcpSocket> Connect(const SocketAddress& address, const Deadline& deadline);

  // The next incoming connection; `peer` receives its address.
  absl::StatusOr<TcpSocket> Accept(const Deadline& deadline, SocketAddress* peer) const;
  // Sends or receives exactly `bytes` bytes. Receiving fails with kUnavailable if the peer closes
  // first; both fail with kDeadlineExceeded at the deadline.
  absl::Status SendAll(const void* data, size_t bytes, const Deadline& deadline) const;
  absl::Status RecvAll(void* data, size_t bytes, const Deadline& deadline) const;

  absl::StatusOr<SocketAddress> LocalAddress() const;
  // TCP_NODELAY (messages go out at once, never held back waiting for more), and socket buffers
  // of at least `buffer_bytes` where the system allows it (see Note [Socket buffers]).
  absl::Status ConfigureForData(int buffer_bytes) const;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Stops both directions (the peer sees EOF) without releasing the descriptor, so a thread
  // still holding fd() cannot hit a reused one.
  void Shutdown() const;
  // Stops sending only (the peer sees EOF after what was sent); what the peer still sends is
  // received, not answered with a reset (Note [Lingering close] in tcp_channel_close.cc).
  void ShutdownWrite() const;
  void Close();

 private:
  int fd_ = -1;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_SOCKET_H_
