// TcpStore: the Store client of a TcpStoreServer hosted by one rank of the job.
//
// Connect() retries with exponential backoff and jitter until connect_timeout, because the other
// ranks usually start before the host's server is listening. Every call is bounded by a
// deadline: poll() on the socket never waits past it.
//
// Note [TcpStore connections]. GET and WAIT park on the server until their keys appear, so a
// single shared connection would let one thread's Get block every other thread until it returns.
// Instead each call borrows a connection from a small pool (opening another when all are busy)
// and returns it afterwards: concurrent calls never wait on each other, a single-threaded user
// still uses one connection, and at most kMaxIdleConnections stay open when idle. When a Get or
// Wait reaches its deadline the client sends CANCEL and reads the two replies the protocol
// promises, so the connection is clean and goes back to the pool.
//
// Once the server is gone every call fails fast with kUnavailable naming host:port and the
// operation; calls are not retried, since ADD and COMPARE_SET are not idempotent.
#ifndef PADDLE_COLLECTIVE_STORE_TCP_STORE_H_
#define PADDLE_COLLECTIVE_STORE_TCP_STORE_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/store/tcp_store_protocol.h"
#include "paddle/core/deadline.h"

namespace paddle {

struct TcpStoreOptions {
  std::string host;
  int port = 0;
  std::string token;  // "" = $PADDLE_STORE_TOKEN
  absl::Duration timeout = DefaultTimeout(TimeoutKind::kStore);
  absl::Duration connect_timeout = DefaultTimeout(TimeoutKind::kConnect);
};

class TcpStore : public Store {
 public:
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const TcpStoreOptions& options);
  ~TcpStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  using Store::Get;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  using Store::Wait;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  std::string Describe() const override;  // "TCPStore 127.0.0.1:29500"

  static constexpr size_t kMaxIdleConnections = 4;

 private:
  class Connection;
  struct Reply {
    tcp_store::ReplyCode code;
    std::string body;
  };

  TcpStore(const TcpStoreOptions& options, std::string token);

  // One connection attempt plus the handshake, bounded by `deadline`.
  absl::StatusOr<std::unique_ptr<Connection>> Open(const Deadline& deadline);
  absl::Status Handshake(Connection& conn, const Deadline& deadline);
  // A pooled connection, or a new one if none is idle.
  absl::StatusOr<std::unique_ptr<Connection>> Acquire(const Deadline& deadline,
                                                      absl::string_view what);
  void Release(std::unique_ptr<Connection> conn);

  // Sends `request` and returns its reply. A parked request (GET, WAIT) whose deadline passes
  // is cancelled; *cancelled then tells the caller the reply is the CANCELLED one.
  absl::StatusOr<Reply> Call(const tcp_store::Request& request, const Deadline& deadline,
                             bool* cancelled = nullptr);
  // "GET of key 'a'", "WAIT for 3 key(s)": the operation, for error messages.
  static std::string What(const tcp_store::Request& request);
  // Turns an error reply into a Status naming the store and the operation.
  absl::Status ReplyError(const tcp_store::Request& request, const Reply& reply) const;

  TcpStoreOptions options_;
  std::string token_;
  std::string address_;  // "host:port"
  sockaddr_storage server_addr_{};
  socklen_t server_addr_len_ = 0;
  std::atomic<uint32_t> max_frame_bytes_{0};  // the server's, from its HELLO

  // A std::mutex rather than absl::Mutex: Debian's Abseil is not built with ThreadSanitizer, so
  // TSan cannot see absl::Mutex and reports false races; it does see pthread mutexes.
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_TCP_STORE_H_
