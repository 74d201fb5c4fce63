// The TCPStore server's epoll loop. See tcp_store_server.h for what it guarantees and
// Note [TCPStore wire format] in tcp_store_protocol.h for the frames it speaks.
#include "paddle/collective/store/tcp_store_server.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/core/deadline.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {

using tcp_store::Op;
using tcp_store::ReplyCode;
using tcp_store::Request;

namespace {

constexpr uint64_t kWakeTag = 0;
constexpr uint64_t kListenTag = 1;
constexpr size_t kReadChunk = 64 << 10;
// Bytes read from one connection per loop turn, so one fast sender cannot starve the rest.
constexpr size_t kMaxReadPerTurn = 256 << 10;
// Replies queued for a peer that does not read them; past this its requests are not parsed
// until it catches up, so a client that only writes cannot grow the server's memory.
constexpr size_t kMaxPendingReplyBytes = 4 << 20;

std::string SecondsText(std::chrono::steady_clock::duration d) {
  return absl::StrFormat("%.3gs", std::chrono::duration<double>(d).count());
}

}  // namespace

struct TcpStoreServer::Connection {
  Connection(uint64_t id, int fd, std::string peer, size_t max_frame_bytes)
      : id(id), fd(fd), peer(std::move(peer)), parser(max_frame_bytes) {}

  uint64_t id;
  int fd;
  std::string peer;
  tcp_store::RequestParser parser;
  std::string nonce;
  bool authenticated = false;
  bool closing = false;         // write what is queued, then close (after a failed handshake)
  bool reading_paused = false;  // too many unread replies queued
  uint32_t interest = 0;        // events registered with epoll

  std::string out;
  size_t out_start = 0;

  // The parked GET or WAIT, and the keys it is registered under in waiters_.
  absl::optional<Request> parked;
  absl::flat_hash_set<std::string> waiting_on;

  Clock::time_point accepted_at;
  Clock::time_point partial_since{};      // first byte of a still incomplete frame; {} = none
  Clock::time_point write_stuck_since{};  // replies queued, peer not reading; {} = none
  int kernel_queued = -1;  // bytes in the socket's send queue at the last check (SIOCOUTQ)

  size_t pending_out() const { return out.size() - out_start; }
};

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options, std::string token)
    : options_(options), token_(std::move(token)) {}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const TcpStoreServerOptions& options) {
  std::string token = options.token;
  if (token.empty()) {
    token = StringSetting("PADDLE_STORE_TOKEN").value_or("");
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(options, std::move(token)));
  std::string where = tcp_store::FormatHostPort(options.host, options.port);
  if (options.max_frame_bytes < 64 ||
      options.max_frame_bytes > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("TCPStore server on ", where,
                                                   ": max_frame_bytes ", options.max_frame_bytes,
                                                   " must be between 64 and 4294967295"));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat("TCPStore server on ", where,
                                                   ": max_connections ", options.max_connections,
                                                   " must be at least 1"));
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* info = nullptr;
  std::string port_text = absl::StrCat(options.port);
  int rc = getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), port_text.c_str(),
                       &hints, &info);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("TCPStore server cannot resolve ", where, ": ",
                                                   gai_strerror(rc), "; check the store host"));
  }
  int fd = socket(info->ai_family, info->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(info);
    return absl::UnavailableError(
        absl::StrCat("TCPStore server on ", where, ": socket() failed: ", std::strerror(errno)));
  }
  server->listen_fd_ = fd;  // closed by the destructor from here on
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  rc = bind(fd, info->ai_addr, info->ai_addrlen);
  int bind_errno = errno;
  freeaddrinfo(info);
  if (rc != 0) {
    std::string why =
        absl::StrCat("TCPStore server cannot listen on ", where, ": ", std::strerror(bind_errno));
    if (bind_errno == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat(
          why,
          "; another process (an earlier job's store?) holds the port: pick another port, "
          "or port 0 to let the system choose a free one"));
    }
    return absl::UnavailableError(why);
  }
  if (listen(fd, SOMAXCONN) != 0) {
    return absl::UnavailableError(
        absl::StrCat("TCPStore server cannot listen on ", where, ": ", std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  server->port_ = SocketAddress(reinterpret_cast<const sockaddr*>(&bound), bound_len).port();
  server->address_ = tcp_store::FormatHostPort(options.host, server->port_);

  server->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  server->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (server->epoll_fd_ < 0 || server->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("TCPStore server on ", server->address_,
                                               ": epoll/eventfd failed: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->wake_fd_, &ev);
  ev.data.u64 = kListenTag;
  epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);

  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  PADDLE_LOG(INFO, STORE) << "TCPStore server listening on " << server->address_
                          << (server->token_.empty() ? "" : " (job token required)");
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    stop_.store(true);
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
    thread_.join();
  }
  for (auto& entry : connections_) close(entry.second->fd);
  connections_.clear();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void TcpStoreServer::Run() {
  // Timeouts are checked by a sweep over all connections a few times per idle_timeout: with
  // hundreds of connections that costs microseconds, and no per-connection timers are needed.
  auto sweep_every = std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(std::min(options_.idle_timeout, options_.handshake_timeout) / 4));
  sweep_every =
      std::max<Clock::duration>(std::chrono::milliseconds(10),
                                std::min<Clock::duration>(sweep_every, std::chrono::seconds(1)));
  Clock::time_point next_sweep = Clock::now() + sweep_every;
  epoll_event events[128];
  while (!stop_.load()) {
    int wait_ms = static_cast<int>(
        std::chrono::ceil<std::chrono::milliseconds>(next_sweep - Clock::now()).count());
    int n = epoll_wait(epoll_fd_, events, 128, std::max(wait_ms, 0));
    if (n < 0 && errno != EINTR) {
      PADDLE_LOG(ERROR, STORE) << "TCPStore server " << address_
                               << ": epoll_wait failed: " << std::strerror(errno);
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        ssize_t r = read(wake_fd_, &v, sizeof(v));
        (void)r;
        continue;
      }
      if (tag == kListenTag) {
        AcceptAll();
        continue;
      }
      Connection* c = Find(tag);
      if (c == nullptr) continue;  // closed earlier in this turn
      uint32_t e = events[i].events;
      if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (c->closing) {
          Close(*c);  // the peer hung up before reading our last reply; nothing left to do
          continue;
        }
        OnReadable(*c);
        c = Find(tag);
      }
      if (c != nullptr && (e & EPOLLOUT)) Flush(*c);
    }
    // Replies queued this turn (including wake-ups of other connections' parked requests).
    // Flushing can queue more (a connection resumed from backpressure handles its buffered
    // requests), so drain until none are left rather than leaving them for the next turn.
    while (!to_flush_.empty()) {
      std::vector<uint64_t> flush;
      flush.swap(to_flush_);
      for (uint64_t id : flush) {
        if (Connection* c = Find(id)) Flush(*c);
      }
    }
    if (Clock::now() >= next_sweep) {
      Sweep();
      next_sweep = Clock::now() + sweep_every;
    }
  }
}

TcpStoreServer::Connection* TcpStoreServer::Find(uint64_t id) {
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second.get();
}

void TcpStoreServer::AcceptAll() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: pending connections wait in the backlog. Stop watching the listen
        // socket until the next sweep instead of spinning on it while it stays readable.
        PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": accept failed with "
                                << connections_.size()
                                << " connections open: " << std::strerror(errno)
                                << "; raise the open-file limit (ulimit -n)";
        epoll_event ev{};
        ev.data.u64 = kListenTag;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accepting_paused_ = true;
      }
      return;
    }
    std::string peer = SocketAddress(reinterpret_cast<const sockaddr*>(&addr), len).ToString();
    if (!MakeRoom(peer)) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t id = next_id_++;
    // Strangers get small frames only, until they have authenticated (HandleAuth raises it).
    auto conn =
        std::make_unique<Connection>(id, fd, std::move(peer), tcp_store::kMaxHandshakeFrameBytes);
    conn->accepted_at = Clock::now();
    conn->nonce = RandomBytes(tcp_store::kNonceBytes);
    tcp_store::Hello hello;
    hello.token_required = !token_.empty();
    hello.max_frame_bytes = static_cast<uint32_t>(options_.max_frame_bytes);
    hello.nonce = conn->nonce;
    tcp_store::AppendHello(hello, &conn->out);
    Connection& c = *conn;
    connections_.emplace(id, std::move(conn));
    open_connections_.store(static_cast<int64_t>(connections_.size()), std::memory_order_release);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    c.interest = EPOLLIN;
    to_flush_.push_back(id);
    PADDLE_LOG(DEBUG, STORE) << "TCPStore server " << address_ << ": accepted " << c.peer;
  }
}

bool TcpStoreServer::MakeRoom(const std::string& newcomer) {
  if (connections_.size() < static_cast<size_t>(options_.max_connections)) return true;
  Connection* oldest = nullptr;
  for (auto& entry : connections_) {
    Connection& c = *entry.second;
    if (!c.authenticated && (oldest == nullptr || c.accepted_at < oldest->accepted_at)) {
      oldest = &c;
    }
  }
  if (oldest != nullptr) {
    Drop(*oldest, absl::StrCat("replaced by a new connection from ", newcomer, ": ",
                               options_.max_connections, " connections open (max_connections)"));
    return true;
  }
  refused_.fetch_add(1);
  PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": refused a connection from "
                          << newcomer << ": " << options_.max_connections
                          << " authenticated connections open (max_connections)";
  return false;
}

void TcpStoreServer::OnReadable(Connection& c) {
  uint64_t id = c.id;
  char buf[kReadChunk];
  size_t total = 0;
  while (total < kMaxReadPerTurn && !c.reading_paused && !c.closing) {
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      c.parser.Append(absl::string_view(buf, static_cast<size_t>(n)));
      if (c.partial_since == Clock::time_point{}) c.partial_since = Clock::now();
      ProcessFrames(c);
      if (Find(id) == nullptr) return;  // dropped
      continue;
    }
    if (n == 0) {
      if (c.parser.HasPartialFrame()) {
        PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": " << c.peer
                                << " closed the connection in the middle of a frame ("
                                << c.parser.buffered_bytes() << " bytes received)";
      } else if (!c.authenticated) {
        PADDLE_LOG(INFO, STORE) << "TCPStore server " << address_ << ": " << c.peer
                                << " closed the connection before the handshake";
      }
      Close(c);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Drop(c, absl::StrCat("read failed: ", std::strerror(errno)));
    return;
  }
}

void TcpStoreServer::ProcessFrames(Connection& c) {
  uint64_t id = c.id;
  while (!c.closing) {
    if (c.pending_out() > kMaxPendingReplyBytes) {
      c.reading_paused = true;
      UpdateInterest(c);
      break;
    }
    absl::StatusOr<absl::optional<Request>> next = c.parser.Next();
    if (!next.ok()) {
      Drop(c, next.status().message());
      return;
    }
    if (!next->has_value()) break;
    c.partial_since = Clock::time_point{};
    Handle(c, **next);
    if (Find(id) == nullptr) return;
  }
  if (c.parser.HasPartialFrame()) {
    if (c.partial_since == Clock::time_point{}) c.partial_since = Clock::now();
  } else {
    c.partial_since = Clock::time_point{};
  }
}

void TcpStoreServer::Handle(Connection& c, Request& request) {
  if (!c.authenticated) {
    HandleAuth(c, request);
    return;
  }
  if (c.parked.has_value() && request.op != Op::kCancel) {
    Drop(c, absl::StrCat("sent ", tcp_store::OpName(request.op), " while its ",
                         tcp_store::OpName(c.parked->op),
                         " was parked; only CANCEL may follow a parked request"));
    return;
  }
  const std::string* key = request.keys.empty() ? nullptr : &request.keys[0];
  std::string body;
  switch (request.op) {
    case Op::kAuth:
      Drop(c, "sent AUTH twice");
      return;
    case Op::kSet: {
      auto result = data_.insert_or_assign(*key, std::move(request.value));
      Reply(c, ReplyCode::kOk, "");
      if (result.second) KeyCreated(*key);
      return;
    }
    case Op::kGet: {
      auto it = data_.find(*key);
      if (it == data_.end()) {
        Park(c, std::move(request));
        return;
      }
      tcp_store::PutBytes(it->second, &body);
      Reply(c, ReplyCode::kOk, body);
      return;
    }
    case Op::kAdd:
      HandleAdd(c, request);
      return;
    case Op::kCompareSet:
      HandleCompareSet(c, request);
      return;
    case Op::kWait:
      if (MissingKeys(request.keys).empty()) {
        Reply(c, ReplyCode::kOk, "");
      } else {
        Park(c, std::move(request));
      }
      return;
    case Op::kCheck:
      tcp_store::PutU8(MissingKeys(request.keys).empty() ? 1 : 0, &body);
      Reply(c, ReplyCode::kOk, body);
      return;
    case Op::kDelete:
      tcp_store::PutU8(data_.erase(*key) > 0 ? 1 : 0, &body);
      Reply(c, ReplyCode::kOk, body);
      return;
    case Op::kNumKeys:
      tcp_store::PutI64(static_cast<int64_t>(data_.size()), &body);
      Reply(c, ReplyCode::kOk, body);
      return;
    case Op::kCancel:
      // Answer the parked request first (see Note [TCPStore wire format], step 4).
      if (c.parked.has_value()) {
        if (c.parked->op == Op::kWait) tcp_store::PutList(MissingKeys(c.parked->keys), &body);
        Unpark(c);
        Reply(c, ReplyCode::kCancelled, body);
      }
      Reply(c, ReplyCode::kCancelled, "");
      return;
  }
}

void TcpStoreServer::HandleAuth(Connection& c, const Request& request) {
  if (request.op != Op::kAuth) {
    if (!token_.empty()) {
      ReplyError(c, ReplyCode::kUnauthenticated,
                 absl::StrCat("the TCPStore at ", address_,
                              " requires a job token; set PADDLE_STORE_TOKEN to the job's token"));
      c.closing = true;
      PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": dropping connection from "
                              << c.peer << ": sent " << tcp_store::OpName(request.op)
                              << " without the job token";
      dropped_.fetch_add(1);
      return;
    }
    Drop(c, absl::StrCat("sent ", tcp_store::OpName(request.op),
                         " before the AUTH handshake (not a TCPStore client?)"));
    return;
  }
  std::string server_proof;
  if (!token_.empty()) {
    absl::string_view failure;
    if (request.value.empty()) {
      ReplyError(c, ReplyCode::kUnauthenticated,
                 absl::StrCat("the TCPStore at ", address_,
                              " requires a job token; set PADDLE_STORE_TOKEN to the job's token"));
      failure = "no job token";
    } else if (request.expected.size() != tcp_store::kNonceBytes ||
               !ConstantTimeEquals(request.value,
                                   tcp_store::ClientProof(token_, c.nonce, request.expected))) {
      ReplyError(c, ReplyCode::kPermissionDenied,
                 absl::StrCat("token rejected by the TCPStore at ", address_,
                              "; check that PADDLE_STORE_TOKEN matches the job's token"));
      failure = "wrong job token";
    }
    if (!failure.empty()) {
      c.closing = true;
      dropped_.fetch_add(1);
      PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": dropping connection from "
                              << c.peer << ": " << failure;
      return;
    }
    server_proof = tcp_store::ServerProof(token_, c.nonce, request.expected);
  }
  c.authenticated = true;
  c.parser.set_max_frame_bytes(options_.max_frame_bytes);
  std::string body;
  tcp_store::PutBytes(server_proof, &body);
  Reply(c, ReplyCode::kOk, body);
}

void TcpStoreServer::HandleAdd(Connection& c, const Request& request) {
  const std::string& key = request.keys[0];
  auto it = data_.find(key);
  int64_t current = 0;
  if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
    ReplyError(c, ReplyCode::kInvalidArgument,
               absl::StrCat("ADD on key '", key, "': its value (", it->second.size(),
                            " bytes) is not a decimal integer; ADD only works on counters"));
    return;
  }
  int64_t result = 0;
  if (__builtin_add_overflow(current, request.delta, &result)) {
    ReplyError(c, ReplyCode::kInvalidArgument,
               absl::StrCat("ADD on key '", key, "': ", current, " + ", request.delta,
                            " overflows int64"));
    return;
  }
  bool created = it == data_.end();
  data_[key] = absl::StrCat(result);
  std::string body;
  tcp_store::PutI64(result, &body);
  Reply(c, ReplyCode::kOk, body);
  if (created) KeyCreated(key);
}

void TcpStoreServer::HandleCompareSet(Connection& c, const Request& request) {
  const std::string& key = request.keys[0];
  auto it = data_.find(key);
  std::string body;
  if (it == data_.end()) {
    if (request.expected.empty()) {
      data_.emplace(key, request.value);
      tcp_store::PutBytes(request.value, &body);
      Reply(c, ReplyCode::kOk, body);
      KeyCreated(key);
      return;
    }
    tcp_store::PutBytes("", &body);
  } else {
    if (it->second == request.expected) it->second = request.value;
    tcp_store::PutBytes(it->second, &body);
  }
  Reply(c, ReplyCode::kOk, body);
}

std::vector<std::string> TcpStoreServer::MissingKeys(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!data_.contains(k)) missing.push_back(k);
  }
  return missing;
}

void TcpStoreServer::Park(Connection& c, Request request) {
  for (const std::string& k : MissingKeys(request.keys)) {
    if (c.waiting_on.insert(k).second) waiters_[k].push_back(c.id);
  }
  c.parked = std::move(request);
}

void TcpStoreServer::Unpark(Connection& c) {
  for (const std::string& k : c.waiting_on) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    auto& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), c.id), ids.end());
    if (ids.empty()) waiters_.erase(it);
  }
  c.waiting_on.clear();
  c.parked.reset();
}

void TcpStoreServer::KeyCreated(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t id : ids) {
    Connection* c = Find(id);
    if (c == nullptr || !c->parked.has_value()) continue;
    c->waiting_on.erase(key);
    // A WAIT completes only when all its keys exist; one deleted since it parked is waited on
    // again.
    std::vector<std::string> missing = MissingKeys(c->parked->keys);
    if (!missing.empty()) {
      for (const std::string& k : missing) {
        if (c->waiting_on.insert(k).second) waiters_[k].push_back(id);
      }
      continue;
    }
    std::string body;
    if (c->parked->op == Op::kGet) tcp_store::PutBytes(data_.at(key), &body);
    Unpark(*c);
    Reply(*c, ReplyCode::kOk, body);
  }
}

void TcpStoreServer::Reply(Connection& c, ReplyCode code, absl::string_view body) {
  if (c.pending_out() == 0) to_flush_.push_back(c.id);
  tcp_store::AppendFrame(static_cast<uint8_t>(code), body, &c.out);
}

void TcpStoreServer::ReplyError(Connection& c, ReplyCode code, absl::string_view message) {
  std::string body;
  tcp_store::PutBytes(message, &body);
  Reply(c, code, body);
}

void TcpStoreServer::Flush(Connection& c) {
  bool progressed = false;
  while (c.pending_out() > 0) {
    ssize_t n = send(c.fd, c.out.data() + c.out_start, c.pending_out(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out_start += static_cast<size_t>(n);
      progressed = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (c.closing) {
      Close(c);
    } else {
      Drop(c, absl::StrCat("write failed: ", std::strerror(errno)));
    }
    return;
  }
  if (c.pending_out() == 0) {
    c.out.clear();
    c.out_start = 0;
    c.write_stuck_since = Clock::time_point{};
    if (c.closing) {
      Close(c);
      return;
    }
  } else {
    if (c.out_start > c.out.size() / 2) {
      c.out.erase(0, c.out_start);
      c.out_start = 0;
    }
    if (progressed || c.write_stuck_since == Clock::time_point{}) {
      c.write_stuck_since = Clock::now();
    }
  }
  if (c.reading_paused && c.pending_out() <= kMaxPendingReplyBytes / 2) {
    c.reading_paused = false;
    // The peer's time to finish a partial frame starts again now that we read again.
    if (c.partial_since != Clock::time_point{}) c.partial_since = Clock::now();
    UpdateInterest(c);
    uint64_t id = c.id;
    ProcessFrames(c);  // frames already buffered while paused
    if (Find(id) == nullptr) return;
  }
  UpdateInterest(c);
}

void TcpStoreServer::UpdateInterest(Connection& c) {
  uint32_t want = 0;
  if (!c.closing && !c.reading_paused) want |= EPOLLIN;
  if (c.pending_out() > 0) want |= EPOLLOUT;
  if (want == c.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.interest = want;
}

void TcpStoreServer::Sweep() {
  Clock::time_point now = Clock::now();
  if (accepting_paused_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    accepting_paused_ = false;
  }
  auto limit =
      std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(options_.idle_timeout));
  std::string limit_text = absl::FormatDuration(options_.idle_timeout);
  auto handshake_limit = std::chrono::duration_cast<Clock::duration>(
      absl::ToChronoNanoseconds(options_.handshake_timeout));
  std::vector<std::pair<uint64_t, std::string>> drops;
  for (auto& entry : connections_) {
    Connection& c = *entry.second;
    if (c.write_stuck_since != Clock::time_point{}) NoteDrainProgress(c);
    if (!c.authenticated && now - c.accepted_at > handshake_limit) {
      drops.emplace_back(c.id,
                         absl::StrCat("no handshake within ", SecondsText(now - c.accepted_at),
                                      " (handshake_timeout ",
                                      absl::FormatDuration(options_.handshake_timeout), ")"));
    } else if (!c.reading_paused && c.partial_since != Clock::time_point{} &&
               now - c.partial_since > limit) {
      // (While paused for backpressure a frame is incomplete because we stopped reading.)
      drops.emplace_back(
          c.id, absl::StrCat("a frame stayed incomplete for ", SecondsText(now - c.partial_since),
                             " with ", c.parser.buffered_bytes(), " bytes received (idle_timeout ",
                             limit_text, ")"));
    } else if (c.write_stuck_since != Clock::time_point{} && now - c.write_stuck_since > limit) {
      drops.emplace_back(
          c.id,
          absl::StrCat("did not read ", c.pending_out(), " bytes of replies for ",
                       SecondsText(now - c.write_stuck_since), " (idle_timeout ", limit_text, ")"));
    }
  }
  for (auto& d : drops) {
    if (Connection* c = Find(d.first)) Drop(*c, d.second);
  }
}

void TcpStoreServer::NoteDrainProgress(Connection& c) {
  // Our writes only make progress once the kernel's send queue has room, which can take a while
  // after a slow peer starts reading; the queue shrinking is the peer's progress too.
  int queued = 0;
  if (ioctl(c.fd, SIOCOUTQ, &queued) != 0) return;
  if (c.kernel_queued >= 0 && queued < c.kernel_queued) c.write_stuck_since = Clock::now();
  c.kernel_queued = queued;
}

void TcpStoreServer::Drop(Connection& c, absl::string_view reason) {
  PADDLE_LOG(WARN, STORE) << "TCPStore server " << address_ << ": dropping connection from "
                          << c.peer << ": " << reason;
  dropped_.fetch_add(1);
  // Best effort: tell the peer why, if the socket takes it right now.
  std::string last;
  std::string body;
  tcp_store::PutBytes(reason, &body);
  tcp_store::AppendFrame(static_cast<uint8_t>(ReplyCode::kProtocolError), body, &last);
  if (c.pending_out() == 0) {
    ssize_t n = send(c.fd, last.data(), last.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
  }
  Close(c);
}

void TcpStoreServer::Close(Connection& c) {
  Unpark(c);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  connections_.erase(c.id);  // destroys c
  open_connections_.store(static_cast<int64_t>(connections_.size()), std::memory_order_release);
}

absl::Status TcpStoreServer::WaitForClientsToLeave(int64_t keep, absl::Duration timeout) {
  // Polled: this runs once, at the end of a job, and a 5 ms step is far below any timeout.
  const Deadline deadline = Deadline::After(timeout);
  while (open_connections_.load(std::memory_order_acquire) > keep) {
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "TCPStore ", address_, ": ", open_connections_.load(),
          " client connection(s) still open ", "after ", absl::FormatDuration(deadline.Elapsed()),
          " (expected at most ", keep, "); some rank has not finished"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

}  // namespace paddle
