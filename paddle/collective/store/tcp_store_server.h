// The TCPStore server: one rank hosts it, every rank's TcpStore client talks to it.
//
// One epoll thread serves every connection with non-blocking sockets and per-connection read
// and write buffers, so hundreds of clients and thousands of keys cost no thread each. GET and
// WAIT park on the server until their keys appear (see Note [TCPStore wire format] in
// tcp_store_protocol.h) and are answered the moment a SET, ADD or COMPARE_SET creates them.
//
// A store is the first thing every rank of a job touches, and anything can connect to its port,
// so one bad connection must never hurt the others. The server drops, and logs with the peer's
// address (PADDLE_LOG(WARN, STORE)), a connection that sends a malformed or oversized frame,
// does not finish the handshake within `handshake_timeout`, leaves a frame half-sent for longer
// than `idle_timeout`, or does not read its replies for that long; everyone else keeps working.
// Before its handshake a connection may send only frames of a few hundred bytes, and past
// `max_connections` the oldest connection still handshaking makes room for a new one, so
// strangers cost little memory and cannot lock clients out. A peer with more than a few MiB of
// unread replies is not read from until it catches up, so memory per connection stays bounded by
// about one frame plus that much.
//
// With a job token (options.token or $PADDLE_STORE_TOKEN) client and server prove to each other
// that they know the token before anything else (challenge-response both ways; the token never
// crosses the wire; Note [TCPStore wire format]).
#ifndef PADDLE_COLLECTIVE_STORE_TCP_STORE_SERVER_H_
#define PADDLE_COLLECTIVE_STORE_TCP_STORE_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/store/tcp_store_protocol.h"

namespace paddle {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = pick a free port
  // Largest frame accepted (a value plus a few bytes); larger ones drop the connection.
  size_t max_frame_bytes = 64 << 20;
  std::string token;  // "" = $PADDLE_STORE_TOKEN if set, else none
  // How long a connection may sit on a half-sent frame or unread replies before it is dropped.
  // An idle connection between frames is never dropped.
  absl::Duration idle_timeout = absl::Seconds(600);
  // How long a new connection has to finish the handshake.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Connections open at once; past it a new one replaces the oldest still handshaking, or is
  // refused when every open one has authenticated.
  int max_connections = 4096;
};

class TcpStoreServer {
 public:
  // Listens on options.host:options.port and starts the loop thread. A port already in use is
  // kAlreadyExists naming "host:port".
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      const TcpStoreServerOptions& options);
  // Stops the loop and joins it; connected clients see the connection close.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:29500"
  const std::string& address() const { return address_; }

  // Connections dropped for misbehaving since Start (for tests and monitoring).
  int64_t dropped_connections() const { return dropped_.load(std::memory_order_relaxed); }
  // Connections refused at max_connections because every open one had authenticated.
  int64_t refused_connections() const { return refused_.load(std::memory_order_relaxed); }

  // Connections open now (clients, and connections still handshaking).
  int64_t open_connections() const { return open_connections_.load(std::memory_order_acquire); }

  // Waits until at most `keep` connections are open, so the rank hosting the store does not
  // close it under ranks that still read their last keys (the teardown race: a rank that leaves
  // right after a final barrier would reset its peers' connections). kDeadlineExceeded naming
  // the count if clients stay longer than `timeout`.
  absl::Status WaitForClientsToLeave(int64_t keep, absl::Duration timeout);

 private:
  struct Connection;
  using Clock = std::chrono::steady_clock;

  TcpStoreServer(const TcpStoreServerOptions& options, std::string token);

  void Run();
  void AcceptAll();
  // At max_connections, drops the oldest connection still handshaking to make room for
  // `newcomer`; false (and logged) if every open connection has authenticated.
  bool MakeRoom(const std::string& newcomer);
  void OnReadable(Connection& c);
  void ProcessFrames(Connection& c);
  void Handle(Connection& c, tcp_store::Request& request);
  void HandleAuth(Connection& c, const tcp_store::Request& request);
  void HandleAdd(Connection& c, const tcp_store::Request& request);
  void HandleCompareSet(Connection& c, const tcp_store::Request& request);
  void Park(Connection& c, tcp_store::Request request);
  void Unpark(Connection& c);
  void KeyCreated(const std::string& key);
  std::vector<std::string> MissingKeys(const std::vector<std::string>& keys) const;

  void Reply(Connection& c, tcp_store::ReplyCode code, absl::string_view body);
  void ReplyError(Connection& c, tcp_store::ReplyCode code, absl::string_view message);
  void Flush(Connection& c);
  void UpdateInterest(Connection& c);
  void Sweep();
  // Counts the peer consuming bytes already in the kernel's send queue as progress.
  void NoteDrainProgress(Connection& c);
  // Logs why, sends `reason` as a last PROTOCOL_ERROR reply if it fits the socket, and closes.
  void Drop(Connection& c, absl::string_view reason);
  void Close(Connection& c);
  Connection* Find(uint64_t id);

  TcpStoreServerOptions options_;
  std::string token_;
  std::string address_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> open_connections_{0};

  // Everything below is touched only by the loop thread.
  uint64_t next_id_ = 2;  // 0 and 1 tag the wake and listen fds in epoll events
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> connections_;
  absl::flat_hash_map<std::string, std::string> data_;
  // Connections parked on each missing key.
  absl::flat_hash_map<std::string, std::vector<uint64_t>> waiters_;
  // Connections with replies to write at the end of this loop turn.
  std::vector<uint64_t> to_flush_;
  bool accepting_paused_ = false;  // out of descriptors; resumed by the next Sweep()
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_TCP_STORE_SERVER_H_
