// Full-mesh connection setup; see Note [Full-mesh setup] in tcp_mesh.h.
#include "paddle/collective/transport/tcp/tcp_mesh.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// One handshake may take this long (within the overall deadline): a connection that says nothing
// for longer is not one of ours and must not hold up the ones that are.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
// Handshakes in progress at once on one listener. Past this the oldest is dropped: a flood of
// silent connections then costs a genuine peer a retry, never the whole connect timeout.
constexpr size_t kMaxPendingHandshakes = 64;
constexpr size_t kSecretBytes = 32;
constexpr absl::string_view kAcceptLabel = "paddle tcp transport: accept";
constexpr absl::string_view kConnectLabel = "paddle tcp transport: connect";

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.3gs", absl::ToDoubleSeconds(d)); }

// Note [Transport secret]. The ranks of one transport share a 32-byte random secret through the
// store (`<prefix>/secret`, created by whichever rank comes first), mixed with the job token
// (PADDLE_STORE_TOKEN) when the job has one: key = HMAC-SHA256(token, secret), else the secret.
// A peer proves it holds the key by an HMAC over both sides' fresh challenges (Note [TCP
// transport wire format]), so only a process that could read the job's store, and knows the job
// token if there is one, can join the mesh; the key never crosses the wire.

bool SameBytes(const std::string& a, const char* b) {
  return a.size() == tcp_wire::kProofBytes &&
         ConstantTimeEquals(a, absl::string_view(b, tcp_wire::kProofBytes));
}

// A Reply header followed by `reason` (cut to kMaxReasonBytes).
std::string ReplyBytes(absl::string_view reason);

absl::Status SendReply(const TcpSocket& socket, absl::string_view reason,
                       const Deadline& deadline) {
  std::string bytes = ReplyBytes(reason);
  return socket.SendAll(bytes.data(), bytes.size(), deadline);
}

std::string ReplyBytes(absl::string_view reason) {
  absl::string_view text = reason.substr(0, tcp_wire::kMaxReasonBytes);
  std::string out(tcp_wire::kReplyBytes, '\0');
  tcp_wire::EncodeReply(static_cast<uint32_t>(text.size()), out.data());
  out.append(text.data(), text.size());
  return out;
}

// One incoming connection between accept and the end of its handshake.
struct PendingHandshake {
  TcpSocket socket;
  SocketAddress from;
  Deadline deadline = Deadline::Never();
  bool awaiting_proof = false;  // false: reading the connector's Hello; true: its proof
  char in[tcp_wire::kHelloBytes];
  size_t have = 0;
  char hello_c[tcp_wire::kHelloBytes];
  char hello_a[tcp_wire::kHelloBytes];
  tcp_wire::Hello hello;
  size_t Need() const { return awaiting_proof ? tcp_wire::kProofBytes : tcp_wire::kHelloBytes; }
};

class MeshBuilder {
 public:
  MeshBuilder(const TcpMeshOptions& options, const Deadline& deadline)
      : o_(options), deadline_(deadline), links_(options.world_size) {}

  absl::StatusOr<std::vector<TcpMeshLink>> Build();

 private:
  // What one step of an incoming handshake came to.
  struct Step {
    enum { kWaiting, kRejected, kAccepted } outcome = kWaiting;
    int rank = -1;       // kAccepted
    std::string reason;  // kRejected
  };

  std::string AddressKey(int rank) const { return absl::StrCat(o_.store_prefix, "/addr/", rank); }
  ErrorContext Context() const { return ErrorContext().Rank(o_.rank, o_.world_size); }
  Deadline HandshakeDeadline() const {
    return Deadline::After(std::min(kHandshakeTimeout, deadline_.Remaining()));
  }
  tcp_wire::Hello OwnHello(int peer) const;

  absl::Status ReadSecret();
  absl::Status AcceptLowerRanks(const TcpSocket& listener);
  // Reads what the connector has sent and takes the handshake as far as it goes. An error means
  // this job is misconfigured (a proven member with another world size, say): setup fails.
  absl::StatusOr<Step> Advance(PendingHandshake& h);
  absl::StatusOr<Step> Judge(PendingHandshake& h);
  absl::Status ConnectHigherRank(int peer);
  absl::Status Handshake(const TcpSocket& sock, int peer, const std::string& address,
                         const Deadline& deadline);

  const TcpMeshOptions& o_;
  const Deadline deadline_;
  std::vector<TcpMeshLink> links_;
  std::string key_;  // Note [Transport secret]
  uint64_t job_id_ = 0;
  std::string listen_address_;
  std::mt19937_64 random_{std::random_device()()};  // backoff jitter only
};

absl::StatusOr<std::vector<TcpMeshLink>> MeshBuilder::Build() {
  ASSIGN_OR_RETURN(SocketAddress listen_at, SelectListenAddress(o_.interface_name));
  absl::StatusOr<TcpSocket> listener =
      TcpSocket::Listen(listen_at, o_.world_size + static_cast<int>(kMaxPendingHandshakes));
  if (!listener.ok()) {
    return Context()
        .Hint("set PADDLE_SOCKET_IFNAME to an interface of this host")
        .Wrap(listener.status());
  }
  // Accepted sockets inherit the listener's options, so they are set once, here.
  RETURN_IF_ERROR(listener->ConfigureForData(o_.socket_buffer_bytes));
  ASSIGN_OR_RETURN(SocketAddress bound, listener->LocalAddress());
  listen_address_ = bound.ToString();
  RETURN_IF_ERROR(ReadSecret());
  absl::Status published = o_.store->Set(AddressKey(o_.rank), listen_address_);
  if (!published.ok()) {
    return Context().Wrap(Annotate(
        published, absl::StrCat("publishing this rank's address under ", AddressKey(o_.rank))));
  }
  PADDLE_LOG(DEBUG, NET) << "listening on " << listen_address_;
  RETURN_IF_ERROR(AcceptLowerRanks(*listener));
  for (int peer = o_.rank + 1; peer < o_.world_size; ++peer) {
    RETURN_IF_ERROR(ConnectHigherRank(peer));
  }
  PADDLE_LOG(DEBUG, NET) << "connected to " << o_.world_size - 1 << " peer(s) in "
                         << Seconds(deadline_.Elapsed());
  links_[o_.rank].address = listen_address_;
  return std::move(links_);
}

absl::Status MeshBuilder::ReadSecret() {
  std::string key = absl::StrCat(o_.store_prefix, "/secret");
  std::string mine = absl::BytesToHexString(RandomBytes(kSecretBytes));
  absl::StatusOr<std::string> value = o_.store->CompareSet(key, "", mine);
  if (!value.ok()) {
    return Context().Wrap(
        Annotate(value.status(), absl::StrCat("reading the transport secret ", key)));
  }
  bool hex =
      value->size() == 2 * kSecretBytes &&
      std::all_of(value->begin(), value->end(), [](char c) { return absl::ascii_isxdigit(c); });
  if (!hex) {
    return Context().Wrap(absl::FailedPreconditionError(absl::StrCat(
        "store key ", key, " holds ", value->size(),
        " bytes that are not a transport secret (64 hex digits): another program or an older "
        "build uses this store prefix; choose another TransportOptions.store_prefix")));
  }
  TransportKey derived = DeriveTransportKey(absl::HexStringToBytes(*value), o_.job_token);
  key_ = std::move(derived.key);
  job_id_ = derived.job_id;
  return absl::OkStatus();
}

tcp_wire::Hello MeshBuilder::OwnHello(int peer) const {
  tcp_wire::Hello hello;
  hello.rank = static_cast<uint32_t>(o_.rank);
  hello.world_size = static_cast<uint32_t>(o_.world_size);
  hello.peer = static_cast<uint32_t>(peer);
  hello.job_id = job_id_;
  std::string challenge = RandomBytes(hello.challenge.size());
  std::memcpy(hello.challenge.data(), challenge.data(), challenge.size());
  return hello;
}

absl::Status MeshBuilder::AcceptLowerRanks(const TcpSocket& listener) {
  int accepted = 0;
  std::vector<std::string> rejected;
  auto reject = [&](const SocketAddress& from, const std::string& reason) {
    PADDLE_LOG(WARN, NET) << "rejected a connection from " << from.ToString() << ": " << reason;
    // The first few are enough to name the culprit in a timeout error.
    if (rejected.size() < 4)
      rejected.push_back(absl::StrCat("from ", from.ToString(), ": ", reason));
  };
  std::vector<std::unique_ptr<PendingHandshake>> pending;  // oldest first
  std::vector<pollfd> fds;
  while (accepted < o_.rank) {
    if (deadline_.Expired()) {
      std::vector<int> missing;
      for (int r = 0; r < o_.rank; ++r) {
        if (!links_[r].socket.valid()) missing.push_back(r);
      }
      std::string rejections = rejected.empty() ? ""
                                                : absl::StrCat("; rejected connection(s): ",
                                                               absl::StrJoin(rejected, "; "));
      return Context()
          .Op("accept")
          .Waited(deadline_.Elapsed(), o_.connect_timeout)
          .Hint(absl::StrCat("are those ranks running, and can they reach ", listen_address_,
                             "? (PADDLE_SOCKET_IFNAME chooses the interface); ",
                             TimeoutHint(TimeoutKind::kConnect, o_.connect_timeout)))
          .Wrap(absl::DeadlineExceededError(
              absl::StrCat("listening on ", listen_address_, ": rank(s) [",
                           absl::StrJoin(missing, ", "), "] did not connect", rejections)));
    }
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    Deadline wake = deadline_;
    for (const auto& h : pending) {
      fds.push_back(pollfd{h->socket.fd(), POLLIN, 0});
      if (h->deadline.Remaining() < wake.Remaining()) wake = h->deadline;
    }
    int ready = poll(fds.data(), fds.size(), wake.PollTimeoutMillis());
    if (ready < 0 && errno != EINTR) {
      return Context().Op("accept").Wrap(
          absl::InternalError(absl::StrCat("poll(): ", std::strerror(errno))));
    }
    // Handshakes first (fds[i + 1] is pending[i]), then new connections.
    std::vector<std::unique_ptr<PendingHandshake>> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      PendingHandshake& h = *pending[i];
      if (fds[i + 1].revents == 0) {
        if (h.deadline.Expired()) {
          reject(h.from, absl::StrCat("no handshake within ", Seconds(h.deadline.timeout())));
        } else {
          still.push_back(std::move(pending[i]));
        }
        continue;
      }
      ASSIGN_OR_RETURN(Step step, Advance(h));
      if (step.outcome == Step::kWaiting) {
        still.push_back(std::move(pending[i]));
      } else if (step.outcome == Step::kRejected) {
        reject(h.from, step.reason);
      } else {
        links_[step.rank].socket = std::move(h.socket);
        ++accepted;
      }
    }
    pending = std::move(still);
    if (fds[0].revents != 0) {
      auto h = std::make_unique<PendingHandshake>();
      absl::StatusOr<TcpSocket> sock =
          listener.Accept(Deadline::After(absl::ZeroDuration()), &h->from);
      if (sock.ok()) {
        h->socket = std::move(*sock);
        h->deadline = HandshakeDeadline();
        if (pending.size() >= kMaxPendingHandshakes) {
          reject(pending.front()->from, absl::StrCat("dropped: more than ", kMaxPendingHandshakes,
                                                     " handshakes in progress at once"));
          pending.erase(pending.begin());
        }
        pending.push_back(std::move(h));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MeshBuilder::Step> MeshBuilder::Advance(PendingHandshake& h) {
  Step step;
  ssize_t n = recv(h.socket.fd(), h.in + h.have, h.Need() - h.have, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    step.outcome = Step::kRejected;
    step.reason = absl::StrCat("closed during the handshake",
                               n < 0 ? absl::StrCat(": ", std::strerror(errno)) : "");
    return step;
  }
  if (n > 0) h.have += static_cast<size_t>(n);
  if (h.have < h.Need()) return step;
  h.have = 0;
  Deadline deadline = HandshakeDeadline();
  if (!h.awaiting_proof) {
    std::memcpy(h.hello_c, h.in, tcp_wire::kHelloBytes);
    absl::Status decoded = tcp_wire::DecodeHello(h.hello_c, &h.hello);
    std::string reason;
    if (!decoded.ok()) {
      reason = std::string(decoded.message());
    } else if (h.hello.job_id != job_id_) {
      reason =
          "it belongs to another job (another job id): two jobs share an address or a store "
          "prefix, or the job tokens differ";
    }
    if (!reason.empty()) {
      // A stranger learns only that it was turned away: not this rank, world size or job id.
      (void)SendReply(h.socket, "not a member of this job", deadline);
      step.outcome = Step::kRejected;
      step.reason = reason;
      return step;
    }
    tcp_wire::EncodeHello(OwnHello(static_cast<int>(h.hello.rank)), h.hello_a);
    std::string out = ReplyBytes("");
    out.append(h.hello_a, tcp_wire::kHelloBytes);
    out += HandshakeProof(key_, /*from_acceptor=*/true, h.hello_c, h.hello_a);
    absl::Status sent = h.socket.SendAll(out.data(), out.size(), deadline);
    if (!sent.ok()) {
      step.outcome = Step::kRejected;
      step.reason = absl::StrCat("went away during the handshake: ", sent.message());
      return step;
    }
    h.awaiting_proof = true;
    return step;
  }
  if (!SameBytes(HandshakeProof(key_, /*from_acceptor=*/false, h.hello_c, h.hello_a), h.in)) {
    (void)SendReply(h.socket, "not a member of this job", deadline);
    step.outcome = Step::kRejected;
    step.reason = absl::StrCat("it claims to be rank ", h.hello.rank,
                               " of this job but failed to prove the job's secret: a process "
                               "without the job token, or of another job with the same prefix");
    return step;
  }
  return Judge(h);
}

absl::StatusOr<MeshBuilder::Step> MeshBuilder::Judge(PendingHandshake& h) {
  // The connector has proven it is of this job: a mismatch now is a misconfiguration of the job,
  // fatal on both ends since no amount of waiting fixes it. Compared as unsigned, before any
  // index: a rank of 2^31 or more must not turn negative.
  const tcp_wire::Hello& hello = h.hello;
  std::string reason;
  if (hello.world_size != static_cast<uint32_t>(o_.world_size)) {
    reason = absl::StrCat("rank ", hello.rank, " has world size ", hello.world_size, " but rank ",
                          o_.rank, " has ", o_.world_size,
                          ": start every rank with the same world size");
  } else if (hello.peer != static_cast<uint32_t>(o_.rank)) {
    reason =
        absl::StrCat("rank ", hello.rank, " meant to reach rank ", hello.peer, " but reached rank ",
                     o_.rank, " at ", listen_address_, ": two ranks published one address?");
  } else if (hello.rank >= static_cast<uint32_t>(o_.rank)) {
    reason = absl::StrCat("rank ", hello.rank, " connected to rank ", o_.rank,
                          ", but only lower ranks connect to higher ones: mixed builds?");
  } else if (links_[hello.rank].socket.valid()) {
    reason = absl::StrCat("rank ", hello.rank,
                          " connected twice: are two processes running as rank ", hello.rank, "?");
  }
  Deadline deadline = HandshakeDeadline();
  absl::Status sent = SendReply(h.socket, reason, deadline);
  if (!reason.empty()) {
    return Context()
        .Peer(hello.rank < static_cast<uint32_t>(o_.world_size) ? static_cast<int>(hello.rank) : -1,
              h.from.ToString())
        .Op("accept")
        .Wrap(absl::FailedPreconditionError(
            absl::StrCat("rejected the connection from ", h.from.ToString(), ": ", reason)));
  }
  Step step;
  if (!sent.ok()) {
    // The connector will retry: wait for its next attempt.
    step.outcome = Step::kRejected;
    step.reason =
        absl::StrCat("rank ", hello.rank, " went away during the handshake: ", sent.message());
    return step;
  }
  int r = static_cast<int>(hello.rank);
  absl::StatusOr<std::string> address = o_.store->Get(AddressKey(r), deadline_.Remaining());
  links_[r].address = address.ok() ? *address : h.from.ToString();
  step.outcome = Step::kAccepted;
  step.rank = r;
  return step;
}

absl::Status MeshBuilder::ConnectHigherRank(int peer) {
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  absl::Duration backoff = absl::Milliseconds(10);
  int attempts = 0;
  absl::Status last;
  std::string address;
  while (true) {
    ++attempts;
    // Read the address on every attempt: a restarted peer publishes a new one.
    absl::StatusOr<std::string> published = o_.store->Get(AddressKey(peer), deadline_.Remaining());
    if (!published.ok()) {
      return Context()
          .Peer(peer)
          .Op("connect")
          .Waited(deadline_.Elapsed(), o_.connect_timeout)
          .Hint(absl::StrCat("is rank ", peer, " running with the same store and prefix?"))
          .Wrap(Annotate(published.status(),
                         absl::StrCat("waiting for rank ", peer, " to publish its address")));
    }
    address = *published;
    absl::StatusOr<SocketAddress> target = SocketAddress::Parse(address);
    if (!target.ok()) {
      return Context()
          .Peer(peer, address)
          .Op("connect")
          .Wrap(
              Annotate(target.status(), absl::StrCat("the address rank ", peer, " published under ",
                                                     AddressKey(peer), " is not host:port")));
    }
    Deadline attempt = HandshakeDeadline();
    absl::StatusOr<TcpSocket> sock = TcpSocket::Connect(*target, attempt);
    if (sock.ok()) {
      last = Handshake(*sock, peer, address, attempt);
      if (last.ok()) {
        RETURN_IF_ERROR(sock->ConfigureForData(o_.socket_buffer_bytes));
        links_[peer] = TcpMeshLink{std::move(*sock), address};
        return absl::OkStatus();
      }
    } else {
      last = sock.status();
    }
    if (!absl::IsUnavailable(last)) {
      return Context().Peer(peer, address).Op("connect").Wrap(last);
    }
    if (deadline_.Expired()) break;
    absl::Duration sleep = std::min(backoff * jitter(random_), deadline_.Remaining());
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(sleep));
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  return Context()
      .Peer(peer, address)
      .Op("connect")
      .Waited(deadline_.Elapsed(), o_.connect_timeout)
      .Hint(absl::StrCat("is rank ", peer, " running, and is ", address,
                         " reachable from this host? ",
                         TimeoutHint(TimeoutKind::kConnect, o_.connect_timeout)))
      .Wrap(absl::DeadlineExceededError(absl::StrCat("could not connect to rank ", peer, " at ",
                                                     address, " in ", attempts,
                                                     " attempt(s); last error: ", last.message())));
}

absl::Status MeshBuilder::Handshake(const TcpSocket& sock, int peer, const std::string& address,
                                    const Deadline& deadline) {
  char hello_c[tcp_wire::kHelloBytes];
  tcp_wire::EncodeHello(OwnHello(peer), hello_c);
  char reply[tcp_wire::kReplyBytes];
  absl::Status io = sock.SendAll(hello_c, sizeof(hello_c), deadline);
  if (io.ok()) io = sock.RecvAll(reply, sizeof(reply), deadline);
  if (!io.ok()) {
    // A reset or a silent peer mid-handshake is worth another attempt.
    return absl::UnavailableError(absl::StrCat("handshake: ", io.message()));
  }
  // Reads a rejection's text after a Reply header that announced it.
  auto rejection = [&](uint32_t length) {
    std::string reason(length, '\0');
    absl::Status got = sock.RecvAll(reason.data(), length, deadline);
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " at ", address, " rejected the connection: ",
                     got.ok() ? reason : absl::StrCat("(reason lost: ", got.message(), ")")));
  };
  absl::StatusOr<uint32_t> length = tcp_wire::DecodeReply(reply);
  if (!length.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the address published for rank ", peer, " (", address, ", key ", AddressKey(peer),
        ") answered with something else: ", length.status().message(), "; a stale address?"));
  }
  if (*length > 0) return rejection(*length);
  char answer[tcp_wire::kHelloBytes + tcp_wire::kProofBytes];
  io = sock.RecvAll(answer, sizeof(answer), deadline);
  if (!io.ok()) return absl::UnavailableError(absl::StrCat("handshake: ", io.message()));
  const char* hello_a = answer;
  tcp_wire::Hello hello;
  absl::Status decoded = tcp_wire::DecodeHello(hello_a, &hello);
  if (!decoded.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", peer, " at ", address, " sent a garbled handshake: ", decoded.message()));
  }
  if (!SameBytes(HandshakeProof(key_, /*from_acceptor=*/true, hello_c, hello_a),
                 answer + tcp_wire::kHelloBytes)) {
    return absl::FailedPreconditionError(absl::StrCat(
        address, " (published under ", AddressKey(peer), " for rank ", peer,
        ") failed to prove the job's secret: it is not rank ", peer,
        " of this job (a stale address from an earlier run, or another process on that port); "
        "use a fresh store prefix"));
  }
  // Another world size is for the acceptor to judge once it has our proof: then both ends fail
  // with the same message.
  if (hello.rank != static_cast<uint32_t>(peer)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (published under %s) is rank %u, not rank %d: a stale address from an earlier run? "
        "use a fresh store prefix",
        address, AddressKey(peer), hello.rank, peer));
  }
  std::string proof = HandshakeProof(key_, /*from_acceptor=*/false, hello_c, hello_a);
  io = sock.SendAll(proof.data(), proof.size(), deadline);
  if (io.ok()) io = sock.RecvAll(reply, sizeof(reply), deadline);
  if (!io.ok()) return absl::UnavailableError(absl::StrCat("handshake: ", io.message()));
  length = tcp_wire::DecodeReply(reply);
  if (!length.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " at ", address,
                     " sent a garbled handshake reply: ", length.status().message()));
  }
  if (*length > 0) return rejection(*length);
  return absl::OkStatus();
}

}  // namespace

TransportKey DeriveTransportKey(absl::string_view secret, absl::string_view job_token) {
  TransportKey derived;
  derived.key = job_token.empty() ? std::string(secret)
                                  : std::string(DigestBytes(HmacSha256(job_token, secret)));
  Sha256 id;
  id.Update("paddle tcp transport: job id");
  id.Update(derived.key);
  Sha256Digest digest = id.Final();
  std::memcpy(&derived.job_id, digest.data(), sizeof(derived.job_id));
  return derived;
}

std::string HandshakeProof(absl::string_view key, bool from_acceptor, const char* hello_c,
                           const char* hello_a) {
  std::string message(from_acceptor ? kAcceptLabel : kConnectLabel);
  message.append(hello_c, tcp_wire::kHelloBytes);
  message.append(hello_a, tcp_wire::kHelloBytes);
  return std::string(DigestBytes(HmacSha256(key, message)));
}

absl::StatusOr<std::vector<TcpMeshLink>> ConnectFullMesh(const TcpMeshOptions& options) {
  if (options.world_size == 1) return std::vector<TcpMeshLink>(1);
  MeshBuilder builder(options, Deadline::After(options.connect_timeout));
  return builder.Build();
}

}  // namespace paddle
