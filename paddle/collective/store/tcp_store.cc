// The TcpStore client: connection setup with backoff, the handshake, the connection pool and
// deadline-bounded request/reply. See Note [TcpStore connections] in tcp_store.h.
#include "paddle/collective/store/tcp_store.h"

#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

using tcp_store::Op;
using tcp_store::ReplyCode;
using tcp_store::Request;

namespace {

// A reply must come this soon after CANCEL, or the connection is given up on.
constexpr absl::Duration kCancelGrace = absl::Seconds(10);
// Room for a reply's framing on top of the largest value the server accepts.
constexpr uint32_t kReplyOverhead = 64;
// The HELLO frame is small; the real limit is learnt from it.
constexpr size_t kHelloMaxBytes = 1024;

std::string SecondsText(absl::Duration d) {
  return absl::StrFormat("%.3gs", absl::ToDoubleSeconds(d));
}

// Poll/IO outcomes inside a connection, turned into user-facing errors by the caller.
absl::Status IoTimeout() { return absl::DeadlineExceededError("no reply before the deadline"); }

}  // namespace

// One socket to the server, used by one thread at a time (see Note [TcpStore connections]).
class TcpStore::Connection {
 public:
  explicit Connection(int fd) : fd_(fd), in_(kHelloMaxBytes, tcp_store::IsValidReplyCode) {}
  ~Connection() { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void set_max_frame_bytes(size_t n) { in_.set_max_frame_bytes(n); }

  absl::Status SendAll(absl::string_view bytes, const Deadline& deadline) {
    while (!bytes.empty()) {
      ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        RETURN_IF_ERROR(PollFor(POLLOUT, deadline));
        continue;
      }
      return absl::UnavailableError(absl::StrCat("send failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  // The next whole reply frame.
  absl::StatusOr<Reply> ReadReply(const Deadline& deadline) {
    char buf[64 << 10];
    while (true) {
      uint8_t type = 0;
      absl::string_view body;
      absl::StatusOr<bool> got = in_.Next(&type, &body);
      if (!got.ok()) {
        return absl::InternalError(
            absl::StrCat("malformed reply from the server: ", got.status().message()));
      }
      if (*got) return Reply{static_cast<ReplyCode>(type), std::string(body)};
      RETURN_IF_ERROR(PollFor(POLLIN, deadline));
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        in_.Append(absl::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0) {
        return absl::UnavailableError("the server closed the connection");
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrCat("recv failed: ", std::strerror(errno)));
      }
    }
  }

  // Waits until the socket is ready for `events`, or the deadline passes (IoTimeout()). Polls
  // at least once, so a socket that is already ready never counts as timed out.
  absl::Status PollFor(short events, const Deadline& deadline) {
    while (true) {
      pollfd p{fd_, events, 0};
      int rc = poll(&p, 1, deadline.PollTimeoutMillis());
      if (rc > 0) return absl::OkStatus();  // errors and hang-ups surface in send/recv
      if (rc < 0 && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("poll failed: ", std::strerror(errno)));
      }
      if (deadline.Expired()) return IoTimeout();
    }
  }

  int fd() const { return fd_; }

 private:
  int fd_;
  tcp_store::FrameBuffer in_;
};

TcpStore::TcpStore(const TcpStoreOptions& options, std::string token)
    : options_(options),
      token_(std::move(token)),
      address_(tcp_store::FormatHostPort(options.host, options.port)) {
  set_timeout(options.timeout);
}

TcpStore::~TcpStore() = default;

std::string TcpStore::Describe() const { return absl::StrCat("TCPStore ", address_); }

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const TcpStoreOptions& options) {
  std::string where = tcp_store::FormatHostPort(options.host, options.port);
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("TcpStore::Connect: '", where,
                     "' is not a valid store address; set host and a port "
                     "in 1..65535 (the port the rank hosting the TCPStore listens on)"));
  }
  std::string token = options.token;
  if (token.empty()) {
    token = StringSetting("PADDLE_STORE_TOKEN").value_or("");
  }
  std::unique_ptr<TcpStore> store(new TcpStore(options, std::move(token)));

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* info = nullptr;
  std::string port_text = absl::StrCat(options.port);
  int rc = getaddrinfo(options.host.c_str(), port_text.c_str(), &hints, &info);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve the TCPStore host ", where, ": ", gai_strerror(rc)));
  }
  std::memcpy(&store->server_addr_, info->ai_addr, info->ai_addrlen);
  store->server_addr_len_ = info->ai_addrlen;
  freeaddrinfo(info);

  // The host rank may start its server after we start: retry refused and reset connections with
  // exponential backoff (10 ms doubling to 1 s) and +-50% jitter, so a whole job's ranks do not
  // knock in lockstep.
  Deadline deadline = Deadline::After(options.connect_timeout);
  absl::BitGen jitter;
  absl::Duration backoff = absl::Milliseconds(10);
  int attempts = 0;
  absl::Status last;
  while (true) {
    ++attempts;
    absl::StatusOr<std::unique_ptr<Connection>> conn = store->Open(deadline);
    if (conn.ok()) {
      {
        std::lock_guard<std::mutex> lock(store->mu_);
        store->idle_.push_back(std::move(*conn));
      }
      PADDLE_LOG(DEBUG, STORE) << "connected to the TCPStore at " << where << " after " << attempts
                               << " attempt(s)";
      return store;
    }
    last = conn.status();
    // Only "nobody is listening yet" is worth retrying; a rejected token, a foreign protocol or
    // an expired deadline are final.
    if (!absl::IsUnavailable(last) || deadline.Expired()) break;
    absl::Duration sleep = backoff * absl::Uniform(jitter, 0.5, 1.5);
    sleep = std::min(sleep, deadline.Remaining());
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(sleep));
    backoff = std::min(backoff * 2, absl::Seconds(1));
    if (deadline.Expired()) break;  // keep the last real error rather than a 0 ms attempt's
  }
  if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
  return absl::DeadlineExceededError(absl::StrCat(
      "could not connect to the TCPStore at ", where, " after ", attempts, " attempt(s) over ",
      SecondsText(deadline.Elapsed()), " (connect_timeout ", SecondsText(options.connect_timeout),
      "); last error: ", last.message(), "; is the rank hosting the store running and reachable? ",
      TimeoutHint(TimeoutKind::kConnect, options.connect_timeout)));
}

absl::StatusOr<std::unique_ptr<TcpStore::Connection>> TcpStore::Open(const Deadline& deadline) {
  int fd = socket(server_addr_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("socket() failed: ", std::strerror(errno)));
  }
  auto conn = std::make_unique<Connection>(fd);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc = connect(fd, reinterpret_cast<const sockaddr*>(&server_addr_), server_addr_len_);
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    return absl::UnavailableError(std::strerror(errno));
  }
  if (rc != 0) {
    absl::Status ready = conn->PollFor(POLLOUT, deadline);
    if (!ready.ok()) {
      return absl::IsDeadlineExceeded(ready)
                 ? absl::DeadlineExceededError("connect() did not complete before the deadline")
                 : ready;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return absl::UnavailableError(std::strerror(err));
  }
  absl::Status s = Handshake(*conn, deadline);
  if (!s.ok()) return s;
  return conn;
}

absl::Status TcpStore::Handshake(Connection& conn, const Deadline& deadline) {
  absl::StatusOr<Reply> hello_frame = conn.ReadReply(deadline);
  if (!hello_frame.ok()) {
    // A listener that closes at once is a server still starting or shutting down: retryable.
    if (absl::IsDeadlineExceeded(hello_frame.status())) {
      return absl::DeadlineExceededError("the server sent no HELLO before the deadline");
    }
    return hello_frame.status();
  }
  if (hello_frame->code != ReplyCode::kHello) {
    return absl::FailedPreconditionError(
        absl::StrCat("TCPStore at ", address_,
                     ": the first frame is not a HELLO (is something else listening there?)"));
  }
  absl::StatusOr<tcp_store::Hello> hello = tcp_store::DecodeHello(hello_frame->body);
  if (!hello.ok()) return Annotate(hello.status(), absl::StrCat("TCPStore at ", address_));
  if (hello->token_required && token_.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("the TCPStore at ", address_,
                     " requires a job token; set PADDLE_STORE_TOKEN to the job's token"));
  }
  // No downgrade: with a token we only talk to a server that proves it knows the token too.
  if (!token_.empty() && !hello->token_required) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the TCPStore at ", address_,
        " does not ask for the job token, so it cannot prove it is the job's store: refusing it "
        "(another job's store on this address, or one started without PADDLE_STORE_TOKEN?)"));
  }
  Request auth;
  auth.op = Op::kAuth;
  if (hello->token_required) {
    auth.expected = RandomBytes(tcp_store::kNonceBytes);
    auth.value = tcp_store::ClientProof(token_, hello->nonce, auth.expected);
  }
  std::string frame;
  tcp_store::AppendRequest(auth, &frame);
  RETURN_IF_ERROR(conn.SendAll(frame, deadline));
  absl::StatusOr<Reply> reply = conn.ReadReply(deadline);
  if (!reply.ok()) return reply.status();
  if (reply->code != ReplyCode::kOk) return ReplyError(auth, *reply);
  if (!token_.empty()) {
    tcp_store::FieldReader reader("AUTH reply", reply->body);
    std::string proof;
    absl::Status read = reader.ReadBytes("server proof", &proof);
    if (read.ok()) read = reader.Finish();
    if (!read.ok() ||
        !ConstantTimeEquals(proof, tcp_store::ServerProof(token_, hello->nonce, auth.expected))) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the TCPStore at ", address_,
          " failed to prove it knows the job token: refusing it (an impostor on this address, or "
          "a store of another job; check PADDLE_STORE_TOKEN)"));
    }
  }
  conn.set_max_frame_bytes(size_t{hello->max_frame_bytes} + kReplyOverhead);
  max_frame_bytes_.store(hello->max_frame_bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpStore::Connection>> TcpStore::Acquire(const Deadline& deadline,
                                                                        absl::string_view what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
  }
  // All pooled connections are busy in other threads: open one more. The server is known to be
  // up, so a single attempt; a refusal means it is gone.
  Deadline open_deadline = deadline.Remaining() < options_.connect_timeout
                               ? deadline
                               : Deadline::After(options_.connect_timeout);
  absl::StatusOr<std::unique_ptr<Connection>> conn = Open(open_deadline);
  if (!conn.ok()) {
    return absl::UnavailableError(absl::StrCat(
        Describe(), ": ", what, " failed: cannot open another connection to the server: ",
        conn.status().message(), " (did the rank hosting the store exit?)"));
  }
  return conn;
}

void TcpStore::Release(std::unique_ptr<Connection> conn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(conn));
}

std::string TcpStore::What(const Request& request) {
  std::string op(tcp_store::OpName(request.op));
  switch (request.op) {
    case Op::kSet:
      return absl::StrCat(op, " of key '", request.keys[0], "' (", request.value.size(), " bytes)");
    case Op::kGet:
    case Op::kAdd:
    case Op::kCompareSet:
    case Op::kDelete:
      return absl::StrCat(op, " of key '", request.keys[0], "'");
    case Op::kWait:
    case Op::kCheck:
      return absl::StrCat(op, " for ", request.keys.size(), " key(s)");
    case Op::kAuth:
    case Op::kNumKeys:
    case Op::kCancel:
      break;
  }
  return op;
}

absl::Status TcpStore::ReplyError(const Request& request, const Reply& reply) const {
  tcp_store::FieldReader reader("reply", reply.body);
  std::string message;
  if (!reader.ReadBytes("message", &message).ok()) message = "(no message)";
  std::string text = absl::StrCat(Describe(), ": ", What(request), ": ", message);
  switch (reply.code) {
    case ReplyCode::kInvalidArgument:
      return absl::InvalidArgumentError(text);
    case ReplyCode::kUnauthenticated:
      return absl::UnauthenticatedError(message);
    case ReplyCode::kPermissionDenied:
      return absl::PermissionDeniedError(message);
    case ReplyCode::kProtocolError:
      return absl::InternalError(absl::StrCat(text, " (the server dropped the connection)"));
    default:
      return absl::InternalError(absl::StrCat(Describe(), ": ", What(request),
                                              ": unexpected reply type ",
                                              static_cast<int>(reply.code)));
  }
}

absl::StatusOr<TcpStore::Reply> TcpStore::Call(const Request& request, const Deadline& deadline,
                                               bool* cancelled) {
  size_t frame_bytes = tcp_store::EncodedRequestBytes(request) - 4;
  uint32_t max_frame_bytes = max_frame_bytes_.load(std::memory_order_relaxed);
  if (frame_bytes > max_frame_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        Describe(), ": ", What(request), " needs a ", frame_bytes,
        "-byte frame, over the server's limit of ", max_frame_bytes,
        " bytes; raise TcpStoreServerOptions::max_frame_bytes on the rank hosting the store"));
  }
  std::string what = What(request);
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Acquire(deadline, what));
  std::string frame;
  tcp_store::AppendRequest(request, &frame);

  // Failures below leave the connection's framing unknown, so it is closed, not pooled.
  auto fail = [&](const absl::Status& s) -> absl::Status {
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(absl::StrCat(
          Describe(), ": ", what, " got no reply within ", SecondsText(deadline.Elapsed()),
          " (timeout ", SecondsText(deadline.timeout()), "); the server may be overloaded; ",
          TimeoutHint(TimeoutKind::kStore, deadline.timeout())));
    }
    if (absl::IsUnavailable(s)) {
      return absl::UnavailableError(absl::StrCat(Describe(), ": ", what, " failed: ", s.message(),
                                                 " (did the rank hosting the store exit?)"));
    }
    return Annotate(s, absl::StrCat(Describe(), ": ", what));
  };
  absl::Status sent = conn->SendAll(frame, deadline);
  if (!sent.ok()) return fail(sent);
  absl::StatusOr<Reply> reply = conn->ReadReply(deadline);
  bool parked = request.op == Op::kGet || request.op == Op::kWait;
  if (!reply.ok() && parked && absl::IsDeadlineExceeded(reply.status())) {
    // Note [TCPStore wire format], step 4: after CANCEL come exactly two replies, the parked
    // request's (CANCELLED, or its result if it won the race) and the CANCEL's own.
    Deadline grace = Deadline::After(kCancelGrace);
    Request cancel;
    cancel.op = Op::kCancel;
    std::string cancel_frame;
    tcp_store::AppendRequest(cancel, &cancel_frame);
    absl::Status s = conn->SendAll(cancel_frame, grace);
    if (!s.ok()) return fail(s);
    reply = conn->ReadReply(grace);
    if (!reply.ok()) return fail(reply.status());
    absl::StatusOr<Reply> cancel_reply = conn->ReadReply(grace);
    if (!cancel_reply.ok()) return fail(cancel_reply.status());
    if (cancelled != nullptr) *cancelled = reply->code == ReplyCode::kCancelled;
  }
  if (!reply.ok()) return fail(reply.status());
  if (reply->code == ReplyCode::kProtocolError) return ReplyError(request, *reply);
  Release(std::move(conn));
  return reply;
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  Request r;
  r.op = Op::kSet;
  r.keys.emplace_back(key);
  r.value = std::string(value);
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, absl::Duration timeout) {
  Request r;
  r.op = Op::kGet;
  r.keys.emplace_back(key);
  Deadline deadline = Deadline::After(timeout);
  bool cancelled = false;
  ASSIGN_OR_RETURN(Reply reply, Call(r, deadline, &cancelled));
  if (cancelled) return StoreTimeoutError(*this, "Get", r.keys, 1, deadline);
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("GET reply", reply.body);
  std::string value;
  RETURN_IF_ERROR(reader.ReadBytes("value", &value));
  return value;
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  Request r;
  r.op = Op::kAdd;
  r.keys.emplace_back(key);
  r.delta = delta;
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("ADD reply", reply.body);
  int64_t value = 0;
  RETURN_IF_ERROR(reader.ReadI64("value", &value));
  return value;
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) {
  Request r;
  r.op = Op::kCompareSet;
  r.keys.emplace_back(key);
  r.expected = std::string(expected);
  r.value = std::string(desired);
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("COMPARE_SET reply", reply.body);
  std::string value;
  RETURN_IF_ERROR(reader.ReadBytes("value", &value));
  return value;
}

absl::Status TcpStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  Request r;
  r.op = Op::kWait;
  r.keys.assign(keys.begin(), keys.end());
  Deadline deadline = Deadline::After(timeout);
  bool cancelled = false;
  ASSIGN_OR_RETURN(Reply reply, Call(r, deadline, &cancelled));
  if (cancelled) {
    tcp_store::FieldReader reader("WAIT reply", reply.body);
    std::vector<std::string> missing;
    RETURN_IF_ERROR(reader.ReadList("missing", &missing));
    return StoreTimeoutError(*this, "Wait", missing, keys.size(), deadline);
  }
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  return absl::OkStatus();
}

absl::StatusOr<bool> TcpStore::Check(absl::Span<const std::string> keys) {
  Request r;
  r.op = Op::kCheck;
  r.keys.assign(keys.begin(), keys.end());
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("CHECK reply", reply.body);
  uint8_t all = 0;
  RETURN_IF_ERROR(reader.ReadU8("all_exist", &all));
  return all != 0;
}

absl::StatusOr<bool> TcpStore::DeleteKey(absl::string_view key) {
  Request r;
  r.op = Op::kDelete;
  r.keys.emplace_back(key);
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("DELETE reply", reply.body);
  uint8_t existed = 0;
  RETURN_IF_ERROR(reader.ReadU8("existed", &existed));
  return existed != 0;
}

absl::StatusOr<int64_t> TcpStore::NumKeys() {
  Request r;
  r.op = Op::kNumKeys;
  ASSIGN_OR_RETURN(Reply reply, Call(r, Deadline::After(timeout())));
  if (reply.code != ReplyCode::kOk) return ReplyError(r, reply);
  tcp_store::FieldReader reader("NUM_KEYS reply", reply.body);
  int64_t n = 0;
  RETURN_IF_ERROR(reader.ReadI64("count", &n));
  return n;
}

}  // namespace paddle
