// Full-mesh connection setup; see Note [Full-mesh setup] in tcp_mesh.h.
#include "paddle/collective/transport/tcp/tcp_mesh.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// One handshake may take this long (within the overall deadline): a connection that says nothing
// for longer is not one of ours and must not hold up the ones that are.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.3gs", absl::ToDoubleSeconds(d)); }

class MeshBuilder {
 public:
  // Randomness comes from std::random_device rather than absl::BitGen, whose shared pool in the
  // (uninstrumented) system Abseil ThreadSanitizer reports as a race between ranks-as-threads.
  MeshBuilder(const TcpMeshOptions& options, const Deadline& deadline)
      : o_(options),
        deadline_(deadline),
        links_(options.world_size),
        random_(std::random_device()()) {}

  absl::StatusOr<std::vector<TcpMeshLink>> Build();

 private:
  std::string AddressKey(int rank) const { return absl::StrCat(o_.store_prefix, "/addr/", rank); }
  ErrorContext Context() const { return ErrorContext().Rank(o_.rank, o_.world_size); }
  Deadline HandshakeDeadline() const {
    return Deadline::After(std::min(kHandshakeTimeout, deadline_.Remaining()));
  }

  absl::Status ReadNonce();
  absl::Status AcceptLowerRanks(const TcpSocket& listener);
  // Answers one incoming handshake. Returns the rank it came from, -1 if rejected for not being
  // from this job (the wait goes on; `reason` says why), or an error if this job is misconfigured.
  absl::StatusOr<int> AnswerHandshake(const TcpSocket& sock, const SocketAddress& from,
                                      std::string* reason);
  absl::Status ConnectHigherRank(int peer);
  absl::Status Handshake(const TcpSocket& sock, int peer, const std::string& address,
                         const Deadline& deadline);

  const TcpMeshOptions& o_;
  const Deadline deadline_;
  std::vector<TcpMeshLink> links_;
  uint64_t nonce_ = 0;
  std::string listen_address_;
  std::mt19937_64 random_;
};

absl::StatusOr<std::vector<TcpMeshLink>> MeshBuilder::Build() {
  ASSIGN_OR_RETURN(SocketAddress listen_at, SelectListenAddress(o_.interface_name));
  absl::StatusOr<TcpSocket> listener = TcpSocket::Listen(listen_at, o_.world_size);
  if (!listener.ok()) {
    return Context()
        .Hint("set PADDLE_SOCKET_IFNAME to an interface of this host")
        .Wrap(listener.status());
  }
  // Accepted sockets inherit the listener's options, so they are set once, here.
  RETURN_IF_ERROR(listener->ConfigureForData(o_.socket_buffer_bytes));
  ASSIGN_OR_RETURN(SocketAddress bound, listener->LocalAddress());
  listen_address_ = bound.ToString();
  RETURN_IF_ERROR(ReadNonce());
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

absl::Status MeshBuilder::ReadNonce() {
  std::string key = absl::StrCat(o_.store_prefix, "/nonce");
  std::string mine = absl::StrFormat("%016x", random_());
  absl::StatusOr<std::string> value = o_.store->CompareSet(key, "", mine);
  if (!value.ok()) {
    return Context().Wrap(Annotate(value.status(), absl::StrCat("reading the job nonce ", key)));
  }
  if (!absl::SimpleHexAtoi(*value, &nonce_)) {
    return Context().Wrap(absl::FailedPreconditionError(absl::StrCat(
        "store key ", key, " holds '", *value,
        "', not a transport nonce: another program uses this store prefix; choose another "
        "TransportOptions.store_prefix")));
  }
  return absl::OkStatus();
}

absl::Status MeshBuilder::AcceptLowerRanks(const TcpSocket& listener) {
  int accepted = 0;
  std::vector<std::string> rejected;
  while (accepted < o_.rank) {
    SocketAddress from;
    absl::StatusOr<TcpSocket> sock = listener.Accept(deadline_, &from);
    if (!sock.ok()) {
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
          .Wrap(absl::Status(sock.status().code(),
                             absl::StrCat("listening on ", listen_address_, ": rank(s) [",
                                          absl::StrJoin(missing, ", "), "] did not connect: ",
                                          sock.status().message(), rejections)));
    }
    std::string reason;
    absl::StatusOr<int> peer = AnswerHandshake(*sock, from, &reason);
    if (!peer.ok()) return peer.status();
    if (*peer < 0) {
      PADDLE_LOG(WARN, NET) << "rejected a connection from " << from.ToString() << ": " << reason;
      // The first few are enough to name the culprit in a timeout error.
      if (rejected.size() < 4)
        rejected.push_back(absl::StrCat("from ", from.ToString(), ": ", reason));
      continue;
    }
    links_[*peer].socket = std::move(*sock);
    ++accepted;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> MeshBuilder::AnswerHandshake(const TcpSocket& sock, const SocketAddress& from,
                                                 std::string* reason) {
  Deadline deadline = HandshakeDeadline();
  char in[tcp_wire::kHelloBytes];
  absl::Status got = sock.RecvAll(in, sizeof(in), deadline);
  if (!got.ok()) {
    *reason = absl::StrCat("no handshake: ", got.message());
    return -1;
  }
  tcp_wire::Hello hello;
  absl::Status decoded = tcp_wire::DecodeHello(in, &hello);
  // Misconfigurations of this very job (same nonce) are fatal: no amount of waiting fixes them.
  bool fatal = false;
  int r = static_cast<int>(hello.rank);
  if (!decoded.ok()) {
    *reason = std::string(decoded.message());
  } else if (hello.nonce != nonce_) {
    *reason = absl::StrFormat(
        "it is rank %d of another job (nonce %016x, this job's is %016x): two jobs share an "
        "address or a store prefix",
        r, hello.nonce, nonce_);
  } else if (hello.world_size != static_cast<uint32_t>(o_.world_size)) {
    fatal = true;
    *reason = absl::StrCat("rank ", r, " has world size ", hello.world_size, " but rank ", o_.rank,
                           " has ", o_.world_size, ": start every rank with the same world size");
  } else if (hello.peer != static_cast<uint32_t>(o_.rank)) {
    fatal = true;
    *reason = absl::StrCat("rank ", r, " meant to reach rank ", hello.peer, " but reached rank ",
                           o_.rank, " at ", listen_address_, ": two ranks published one address?");
  } else if (r >= o_.rank) {
    fatal = true;
    *reason = absl::StrCat("rank ", r, " connected to rank ", o_.rank,
                           ", but only lower ranks connect to higher ones: mixed builds?");
  } else if (links_[r].socket.valid()) {
    fatal = true;
    *reason =
        absl::StrCat("rank ", r, " connected twice: are two processes running as rank ", r, "?");
  }
  std::string text = reason->substr(0, tcp_wire::kMaxReasonBytes);
  std::string out(tcp_wire::kHelloBytes + 4 + text.size(), '\0');
  tcp_wire::EncodeHello(
      {static_cast<uint32_t>(o_.rank), static_cast<uint32_t>(o_.world_size), hello.rank, nonce_},
      out.data());
  uint32_t length = static_cast<uint32_t>(text.size());
  std::memcpy(out.data() + tcp_wire::kHelloBytes, &length, 4);
  std::memcpy(out.data() + tcp_wire::kHelloBytes + 4, text.data(), text.size());
  absl::Status sent = sock.SendAll(out.data(), out.size(), deadline);
  if (fatal) {
    return Context()
        .Peer(r, from.ToString())
        .Op("accept")
        .Wrap(absl::FailedPreconditionError(
            absl::StrCat("rejected the connection from ", from.ToString(), ": ", *reason)));
  }
  if (!reason->empty()) return -1;
  if (!sent.ok()) {
    // The connector will retry: wait for its next attempt.
    *reason = absl::StrCat("rank ", r, " went away during the handshake: ", sent.message());
    return -1;
  }
  absl::StatusOr<std::string> address = o_.store->Get(AddressKey(r), deadline_.Remaining());
  links_[r].address = address.ok() ? *address : from.ToString();
  return r;
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
  char hello[tcp_wire::kHelloBytes];
  tcp_wire::EncodeHello({static_cast<uint32_t>(o_.rank), static_cast<uint32_t>(o_.world_size),
                         static_cast<uint32_t>(peer), nonce_},
                        hello);
  char reply[tcp_wire::kHelloBytes + 4];
  absl::Status io = sock.SendAll(hello, sizeof(hello), deadline);
  if (io.ok()) io = sock.RecvAll(reply, sizeof(reply), deadline);
  if (!io.ok()) {
    // A reset or a silent peer mid-handshake is worth another attempt.
    return absl::UnavailableError(absl::StrCat("handshake: ", io.message()));
  }
  tcp_wire::Hello answer;
  absl::Status decoded = tcp_wire::DecodeHello(reply, &answer);
  if (!decoded.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the address published for rank ", peer, " (", address, ", key ", AddressKey(peer),
        ") answered with something else: ", decoded.message(), "; a stale address?"));
  }
  uint32_t length;
  std::memcpy(&length, reply + tcp_wire::kHelloBytes, 4);
  if (length > tcp_wire::kMaxReasonBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " at ", address, " sent a garbled handshake reply"));
  }
  if (length > 0) {
    std::string reason(length, '\0');
    io = sock.RecvAll(reason.data(), length, deadline);
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " at ", address, " rejected the connection: ",
                     io.ok() ? reason : absl::StrCat("(reason lost: ", io.message(), ")")));
  }
  if (answer.nonce != nonce_ || answer.rank != static_cast<uint32_t>(peer) ||
      answer.world_size != static_cast<uint32_t>(o_.world_size)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (published under %s) is rank %u of %u of job nonce %016x, not rank %d of %d of this "
        "job (nonce %016x): a stale address from an earlier run? use a fresh store prefix",
        address, AddressKey(peer), answer.rank, answer.world_size, answer.nonce, peer,
        o_.world_size, nonce_));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TcpMeshLink>> ConnectFullMesh(const TcpMeshOptions& options) {
  if (options.world_size == 1) return std::vector<TcpMeshLink>(1);
  MeshBuilder builder(options, Deadline::After(options.connect_timeout));
  return builder.Build();
}

}  // namespace paddle
