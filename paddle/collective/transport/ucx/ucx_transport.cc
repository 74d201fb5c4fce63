// UcxTransport: owns the UCP context and one channel per peer, sets the links up through the
// store, waits by driving UCX progress, and poisons everything on the first failure.
#include "paddle/collective/transport/ucx/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/ucx/ucx_channel.h"
#include "paddle/collective/transport/ucx/ucx_error.h"
#include "paddle/collective/transport/ucx/ucx_library.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// Note [UCX hello proof] in ucx_channel.h.
constexpr size_t kSecretBytes = 32;

// Teardown waits this long for the abort messages to leave, then this long for the forcibly
// closed endpoints to release their requests.
constexpr absl::Duration kAbortSendTime = absl::Milliseconds(200);
constexpr absl::Duration kCloseTime = absl::Seconds(1);
// A sleeping waiter wakes at least this often (Note [Waiting]).
constexpr int kMaxSleepMillis = 10;

std::string LocalLabel() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host, " pid ", getpid());
}

class UcxTransport final : public Transport, private UcxChannel::Owner {
 public:
  UcxTransport(int rank, int world_size, absl::Duration spin)
      : rank_(rank), world_size_(world_size), spin_(spin) {}
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  absl::Status Start(const TransportOptions& options);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "ucx"; }
  Channel& channel(int peer) override;
  void Abort(const absl::Status& cause) override;

 private:
  ErrorContext Context() const { return ErrorContext().Rank(rank_, world_size_); }
  absl::Status CreateContext();
  absl::Status ExchangeAddresses(const TransportOptions& options, const Deadline& deadline);
  absl::Status AwaitHellos(const TransportOptions& options, const Deadline& deadline);
  // Note [UCX hello proof] in ucx_channel.h: the key the hellos are proven with.
  absl::StatusOr<std::string> ReadKey(const TransportOptions& options);
  // "; dropped from rank 1: ..." for the channels of `peers` that dropped hellos.
  std::string DescribeRejected(const std::vector<int>& peers);

  bool Await(const UcxOp& op, const Deadline& deadline) override;
  void Poison(const absl::Status& cause) override;
  absl::Status PoisonCause() const override;
  void OpCompleted() override;
  std::shared_ptr<UcxWaiterHandle> WaiterHandle() override { return handle_; }

  bool ProgressAll();
  // Sleeps on the event fds until an event, a wake-up or `deadline` (at most kMaxSleepMillis).
  void Sleep(const Deadline& deadline);
  // Progresses every worker until `done()` or `limit` passes.
  template <typename Done>
  void ProgressUntil(Done done, absl::Duration limit);
  // Once poisoned: tells the peers, closes every link and completes every op (Note [Teardown]).
  void TearDown();

  const int rank_;
  const int world_size_;
  const absl::Duration spin_;
  const std::shared_ptr<UcxWaiterHandle> handle_ =
      std::make_shared<UcxWaiterHandle>(static_cast<UcxWaiter*>(this));
  ucp_context_h context_ = nullptr;
  std::vector<std::unique_ptr<UcxChannel>> channels_;  // null at rank_
  int wake_fd_ = -1;
  std::atomic<int> sleepers_{0};

  std::atomic<bool> poisoned_{false};
  mutable std::mutex mu_;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);

  std::mutex teardown_mu_;
  bool torn_down_ ABSL_GUARDED_BY(teardown_mu_) = false;
};

UcxTransport::~UcxTransport() {
  Abort(absl::CancelledError(
      absl::StrCat("the transport of rank ", rank_, "/", world_size_, " was destroyed")));
  handle_->store(nullptr, std::memory_order_release);
  channels_.clear();
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

// Note [UCX zero-copy over TCP]. UCX 1.13.1 (Debian 12's) completes a zero-copy send twice when
// its tcp transport finds the peer gone while writing it: uct_tcp_ep_sendv's error path purges
// the endpoint, which completes the send's uct_completion_t, and then completes it again, so the
// survivor aborts inside ucp_worker_progress ("uct_iface.h:884 Assertion `comp->count > 0'
// failed ... status=-80") instead of failing its requests. It needs the peer to die while a
// zero-copy send to it is in flight, and CI hit it in a run of the killed-process test. With our
// UCP_ERR_HANDLING_MODE_PEER endpoints tcp carries rendezvous data as zero-copy active messages
// (no RMA lane), and eager messages from about 8 KiB up zero-copy too, so the setting that avoids
// the path is UCX_ZCOPY_THRESH=inf: every send is copied into UCX's buffers first. A standalone
// reproduction (two processes streaming 8 MiB messages both ways over UCX_TLS=tcp, one killed at
// a random moment) aborted in 6 to 7 of 15 to 30 kills with UCX's defaults and in none of 105
// with it (25 of them with the segments below too); UCX_KEEPALIVE_INTERVAL=inf,
// UCX_TCP_PUT_ENABLE=n, UCX_RNDV_THRESH=inf or UCX_TCP_MAX_IOV did not help. The cost is a copy on
// the sender, and with tcp's 8 KiB segments it was large: 64 MiB one way (ucx_transport_test
// --ucx_bench) went from 1.5-3.1 to 0.7-1.0 GB/s. With 256 KiB segments (UCX_TCP_TX_SEG_SIZE,
// UCX_TCP_RX_SEG_SIZE; 64 KiB and 1 MiB measured lower) it measured 1.8-3.5 GB/s against 1.5-3.1
// for zero-copy in interleaved runs. A user on a UCX without this bug may set
// UCX_ZCOPY_THRESH=auto (UCX's default) back.
absl::Status UcxTransport::CreateContext() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Context().Wrap(absl::InternalError("eventfd() failed"));
  ucp_config_t* config = nullptr;
  UCX_RETURN_IF_ERROR(ucp_config_read(nullptr, nullptr, &config),
                      "reading the UCX configuration (UCX_* environment variables)");
  // UCX defaults we change, each only when its variable is unset (ucx_transport.h).
  struct Override {
    const char* env;
    const char* name;
    const char* value;
  };
  for (const Override& o : {Override{"UCX_KEEPALIVE_INTERVAL", "KEEPALIVE_INTERVAL", "1s"},
                            // Note [UCX zero-copy over TCP]
                            Override{"UCX_ZCOPY_THRESH", "ZCOPY_THRESH", "inf"},
                            Override{"UCX_TCP_TX_SEG_SIZE", "TX_SEG_SIZE", "256k"},
                            Override{"UCX_TCP_RX_SEG_SIZE", "RX_SEG_SIZE", "256k"}}) {
    if (std::getenv(o.env) != nullptr) continue;
    ucs_status_t modified = ucp_config_modify(config, o.name, o.value);
    if (modified != UCS_OK) {
      PADDLE_LOG(WARN, NET) << UcxError(modified, "ucp_config_modify",
                                        absl::StrCat("setting ", o.name, "=", o.value));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // workers of this context are used by several threads
  ucs_status_t status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  UCX_RETURN_IF_ERROR(status, Context().Describe() + " initializing UCX (check UCX_TLS)");
  return absl::OkStatus();
}

absl::Status UcxTransport::Start(const TransportOptions& options) {
  const Deadline deadline = Deadline::After(options.connect_timeout);
  RETURN_IF_ERROR(CreateContext());
  channels_.resize(world_size_);
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto link = std::make_shared<UcxLinkInfo>();
    link->rank = rank_;
    link->world_size = world_size_;
    link->peer = peer;
    ASSIGN_OR_RETURN(channels_[peer], UcxChannel::Create(context_, std::move(link), this));
  }
  RETURN_IF_ERROR(ExchangeAddresses(options, deadline));
  return AwaitHellos(options, deadline);
}

absl::Status UcxTransport::ExchangeAddresses(const TransportOptions& options,
                                             const Deadline& deadline) {
  auto key = [&](int from, int to) {
    return absl::StrCat(options.store_prefix, "/ucx/", from, "/", to);
  };
  ASSIGN_OR_RETURN(const std::string proof_key, ReadKey(options));
  const std::string label = LocalLabel();
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    ASSIGN_OR_RETURN(std::string address, channels_[peer]->WorkerAddress());
    // label|address|challenge (Note [UCX hello proof] in ucx_channel.h).
    absl::Status published = options.store->Set(
        key(rank_, peer), absl::StrCat(label, "|", absl::BytesToHexString(address), "|",
                                       absl::BytesToHexString(channels_[peer]->challenge())));
    if (!published.ok()) {
      return Context().Wrap(Annotate(
          published, absl::StrCat("publishing the UCX worker address under ", key(rank_, peer))));
    }
  }
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    absl::StatusOr<std::string> value = options.store->Get(key(peer, rank_), deadline.Remaining());
    if (!value.ok()) {
      return Context()
          .Peer(peer)
          .Op("connect")
          .Waited(deadline.Elapsed(), options.connect_timeout)
          .Hint(absl::StrCat("is rank ", peer, " running with the same store and prefix? ",
                             TimeoutHint(TimeoutKind::kConnect, options.connect_timeout)))
          .Wrap(Annotate(value.status(),
                         absl::StrCat("waiting for rank ", peer, " to publish its address")));
    }
    const size_t last = value->rfind('|');
    const size_t bar =
        last == std::string::npos || last == 0 ? std::string::npos : value->rfind('|', last - 1);
    std::string bytes, challenge;
    if (bar != std::string::npos) {
      bytes = absl::HexStringToBytes(value->substr(bar + 1, last - bar - 1));
      challenge = absl::HexStringToBytes(value->substr(last + 1));
    }
    if (bytes.empty() || challenge.size() != channels_[peer]->challenge().size()) {
      return Context().Peer(peer).Op("connect").Wrap(absl::FailedPreconditionError(
          absl::StrCat("store key ", key(peer, rank_),
                       " does not hold a UCX worker address and challenge: another program or an "
                       "older build uses this store prefix; choose another "
                       "TransportOptions.store_prefix")));
    }
    RETURN_IF_ERROR(channels_[peer]->Connect(bytes, value->substr(0, bar), challenge, proof_key));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> UcxTransport::ReadKey(const TransportOptions& options) {
  // Note [UCX hello proof] in ucx_channel.h: the first rank to arrive creates the secret.
  const std::string key = absl::StrCat(options.store_prefix, "/ucx/secret");
  absl::StatusOr<std::string> value =
      options.store->CompareSet(key, "", absl::BytesToHexString(RandomBytes(kSecretBytes)));
  if (!value.ok()) {
    return Context().Wrap(Annotate(value.status(), absl::StrCat("reading the UCX secret ", key)));
  }
  const std::string secret = absl::HexStringToBytes(*value);
  if (secret.size() != kSecretBytes || absl::BytesToHexString(secret) != *value) {
    return Context().Wrap(absl::FailedPreconditionError(absl::StrCat(
        "store key ", key, " holds ", value->size(),
        " bytes that are not a UCX secret (64 hex digits): another program or an older build "
        "uses this store prefix; choose another TransportOptions.store_prefix")));
  }
  const std::optional<std::string> token = StringSetting("PADDLE_STORE_TOKEN");
  if (!token.has_value()) return secret;
  return std::string(DigestBytes(HmacSha256(*token, secret)));
}

std::string UcxTransport::DescribeRejected(const std::vector<int>& peers) {
  std::string out;
  for (int peer : peers) {
    const std::string rejected = channels_[peer]->RejectedHellos();
    if (!rejected.empty())
      absl::StrAppend(&out, "; on the link to rank ", peer, " dropped ", rejected);
  }
  return out;
}

absl::Status UcxTransport::AwaitHellos(const TransportOptions& options, const Deadline& deadline) {
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      absl::Status hello = channels_[peer]->HelloStatus();
      // Both ways: the peer's hello arrived and ours has left (UcxChannel::HelloSent).
      if (absl::IsUnavailable(hello) || (hello.ok() && !channels_[peer]->HelloSent())) {
        missing.push_back(peer);
      } else if (!hello.ok()) {
        return Context().Peer(peer, channels_[peer]->peer_address()).Op("connect").Wrap(hello);
      }
    }
    absl::Status cause = PoisonCause();
    if (!cause.ok()) {
      // A peer whose hellos we dropped gives up at its own deadline and may close the endpoint
      // before ours expires: the endpoint error is then the symptom, the dropped hellos the cause.
      const std::string rejected = DescribeRejected(missing);
      if (rejected.empty()) return Annotate(cause, "connecting");
      return absl::Status(cause.code(), absl::StrCat("connecting: ", cause.message(), rejected));
    }
    if (missing.empty()) return absl::OkStatus();
    if (deadline.Expired()) break;
    if (!ProgressAll()) Sleep(deadline);
  }
  return Context()
      .Op("connect")
      .Waited(deadline.Elapsed(), options.connect_timeout)
      .Hint(absl::StrCat("are those ranks running, and can UCX reach them (UCX_TLS, "
                         "UCX_NET_DEVICES)? ",
                         TimeoutHint(TimeoutKind::kConnect, options.connect_timeout)))
      .Wrap(absl::DeadlineExceededError(absl::StrCat(
          "no UCX hello exchanged with rank(s) [", absl::StrJoin(missing, ", "),
          "] after connecting to their published addresses", DescribeRejected(missing))));
}

Channel& UcxTransport::channel(int peer) {
  PADDLE_CHECK(peer >= 0 && peer < world_size_ && peer != rank_)
      << "rank " << rank_ << "/" << world_size_ << " asked for the channel to peer " << peer
      << "; valid peers are 0.." << world_size_ - 1 << " except the rank itself";
  return *channels_[peer];
}

// ---- Waiting -----------------------------------------------------------------------------------

// Note [Waiting]. A Wait() progresses every peer's worker, not only its own request's: a large
// send completes only when the peer's rendezvous reply is processed, a dead peer is noticed only
// on its worker, and a rank blocked on one peer must still hear that another has died. While
// progress reports events it keeps going; after `spin_` with none, it arms every worker
// (ucp_worker_arm; a worker with events pending refuses, and we progress again) and sleeps in
// poll() on the workers' event fds plus `wake_fd_`, an eventfd that Poison() leaves readable and
// that a thread completing someone else's op writes to while anyone sleeps. A waiter that
// another thread's progress completed, or whose wake-up a third thread drained first, still
// wakes within kMaxSleepMillis, so a lost wake-up costs latency, never a hang. Once the
// transport is poisoned, the waiter runs the teardown itself (Note [Teardown]).
bool UcxTransport::Await(const UcxOp& op, const Deadline& deadline) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_event = Clock::now();
  const auto spin = absl::ToChronoNanoseconds(spin_);
  while (true) {
    if (poisoned_.load(std::memory_order_acquire)) {
      TearDown();  // completes every op
      return true;
    }
    if (op.IsCompleted()) return true;
    if (ProgressAll()) {
      last_event = Clock::now();
      continue;
    }
    if (deadline.Expired()) return op.IsCompleted();
    if (Clock::now() - last_event < spin) continue;
    Sleep(deadline);
    last_event = Clock::now();
  }
}

bool UcxTransport::ProgressAll() {
  bool any = false;
  for (auto& channel : channels_) {
    if (channel != nullptr && channel->Progress()) any = true;
  }
  return any;
}

void UcxTransport::Sleep(const Deadline& deadline) {
  sleepers_.fetch_add(1);
  std::vector<pollfd> fds;
  fds.push_back({wake_fd_, POLLIN, 0});
  bool armed = true;
  for (auto& channel : channels_) {
    if (channel == nullptr) continue;
    if (!channel->Arm()) {
      armed = false;
      break;
    }
    fds.push_back({channel->event_fd(), POLLIN, 0});
  }
  if (armed) {
    const int millis = deadline.IsNever() ? kMaxSleepMillis
                                          : std::min(deadline.PollTimeoutMillis(), kMaxSleepMillis);
    (void)poll(fds.data(), fds.size(), millis);
    if (fds[0].revents != 0 && !poisoned_.load(std::memory_order_acquire)) {
      uint64_t drained;
      (void)!read(wake_fd_, &drained, sizeof(drained));
    }
  }
  sleepers_.fetch_sub(1);
}

void UcxTransport::OpCompleted() {
  if (sleepers_.load() == 0) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

// ---- Failure -----------------------------------------------------------------------------------

void UcxTransport::Poison(const absl::Status& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (poisoned_.load(std::memory_order_relaxed)) return;
    cause_ = cause.ok() ? absl::AbortedError("Abort() was called with an OK status")
                        : absl::Status(cause.code(), cause.message());
    poisoned_.store(true, std::memory_order_release);
  }
  PADDLE_LOG(INFO, NET) << "transport poisoned: " << PoisonCause();
  // Left readable: every sleeper wakes, now and later.
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

absl::Status UcxTransport::PoisonCause() const {
  if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return absl::Status(cause_.code(), cause_.message());
}

void UcxTransport::Abort(const absl::Status& cause) {
  Poison(cause);
  TearDown();
}

template <typename Done>
void UcxTransport::ProgressUntil(Done done, absl::Duration limit) {
  const Deadline deadline = Deadline::After(limit);
  while (!done() && !deadline.Expired()) {
    if (!ProgressAll()) Sleep(deadline);
  }
}

// Note [Teardown]. Runs once, on the first thread that finds the transport poisoned outside a UCX
// callback (Abort(), a waiter, the destructor); later callers wait for it. 1) Each link sends the
// peer an abort active message with the cause (so the peer fails with our reason, not a bare
// "connection reset") and cancels its unmatched receives. 2) After the abort messages left, or
// kAbortSendTime, every endpoint is closed forcibly, which fails the UCX requests still on it, so
// UCX stops touching the callers' buffers. 3) After those requests completed, or kCloseTime,
// whatever op is left fails with the cause. Every op is complete when it returns.
void UcxTransport::TearDown() {
  std::lock_guard<std::mutex> lock(teardown_mu_);
  if (torn_down_) return;
  const absl::Status cause = PoisonCause();
  std::vector<UcxChannel*> live;
  for (auto& channel : channels_) {
    if (channel != nullptr) live.push_back(channel.get());
  }
  for (UcxChannel* ch : live) ch->StartClose(cause);
  ProgressUntil(
      [&] {
        return std::all_of(live.begin(), live.end(), [](UcxChannel* c) { return c->AbortSent(); });
      },
      kAbortSendTime);
  for (UcxChannel* ch : live) ch->ForceClose();
  ProgressUntil(
      [&] {
        return std::all_of(live.begin(), live.end(), [](UcxChannel* c) { return c->Idle(); });
      },
      kCloseTime);
  for (UcxChannel* ch : live) ch->FailPending(cause);
  torn_down_ = true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const TransportOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX transport: rank ", options.rank, " and world size ", options.world_size,
                     " do not fit: need world_size >= 1 and 0 <= rank < world_size"));
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX transport of rank ", options.rank, "/", options.world_size,
                     ": TransportOptions.store is null; the ranks exchange addresses through it"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> spin_us, IntSetting("PADDLE_UCX_WAIT_SPIN_US"));
  RETURN_IF_ERROR(LoadUcxLibrary());  // Note [UCX loaded on demand]
  auto transport = std::make_unique<UcxTransport>(options.rank, options.world_size,
                                                  absl::Microseconds(spin_us.value_or(20)));
  if (options.world_size > 1) RETURN_IF_ERROR(transport->Start(options));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace paddle
