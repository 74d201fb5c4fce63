// TcpTransport: owns the I/O loop and the channels, and poisons them all on the first failure.
#include "paddle/collective/transport/tcp/tcp_transport.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/tcp/socket_address.h"
#include "paddle/collective/transport/tcp/tcp_channel.h"
#include "paddle/collective/transport/tcp/tcp_loop.h"
#include "paddle/collective/transport/tcp/tcp_mesh.h"
#include "paddle/collective/transport/tcp/tcp_progress.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// Note [Busy polling]. Two knobs trade CPU for small-message latency: a Wait() may spin before it
// sleeps (PADDLE_TCP_WAIT_SPIN_US), and the I/O thread may keep polling after its last event
// (PADDLE_TCP_BUSY_POLL_US), each saving a futex or epoll wake-up per message. transport_bench on
// the 2-core development VM (two ranks = four busy threads) measured both as harmful there: the
// 8-byte ping-pong one-way p50 went from 25 us to 47-52 us with a 20 us spin and to 76-81 us with
// a 50 us busy poll, since a spinning thread holds the core the peer needs; bandwidth did not
// change beyond noise. Since a waiter drives the transport (Note [Waiter drives] in
// tcp_progress.h), its spin polls the sockets itself: with two ranks on two cores the 8-byte p50
// went from 19 to 9 us with a 1000 us spin, while 3-rank allreduces (three ranks on two cores)
// became several times slower with any long spin. So both stay off by default; with a spare
// core per rank they pay, which is why they remain settable. Socket buffers: forcing 4 MiB
// (PADDLE_SOCKET_BUFFER_BYTES) against kernel autotuning showed no consistent difference within the
// noise of that machine, so autotuning, which may grow the receive buffer further, is the default.
struct TcpTuning {
  absl::Duration wait_spin = absl::Microseconds(0);
  bool wait_spin_auto = true;  // PADDLE_TCP_WAIT_SPIN_US unset: Note [Automatic spin]
  absl::Duration busy_poll = absl::Microseconds(0);
  int socket_buffer_bytes = 0;
  bool waiter_drives = true;  // Note [Waiter drives] in tcp_progress.h
};

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(env, &value) || value < 0) {
    PADDLE_LOG(WARN, NET) << name << "='" << env << "' is not a non-negative integer; using "
                          << fallback;
    return fallback;
  }
  return value;
}

TcpTuning TuningFromEnv() {
  TcpTuning defaults;
  TcpTuning t;
  const char* spin = std::getenv("PADDLE_TCP_WAIT_SPIN_US");
  t.wait_spin_auto = spin == nullptr || *spin == '\0';
  t.wait_spin = absl::Microseconds(
      EnvInt("PADDLE_TCP_WAIT_SPIN_US", absl::ToInt64Microseconds(defaults.wait_spin)));
  t.busy_poll = absl::Microseconds(
      EnvInt("PADDLE_TCP_BUSY_POLL_US", absl::ToInt64Microseconds(defaults.busy_poll)));
  t.waiter_drives = EnvInt("PADDLE_TCP_WAITER_READS", defaults.waiter_drives ? 1 : 0) != 0;
  t.socket_buffer_bytes = static_cast<int>(std::min<int64_t>(
      EnvInt("PADDLE_SOCKET_BUFFER_BYTES", defaults.socket_buffer_bytes), 1 << 30));
  return t;
}

// Note [Automatic spin]. OpenMPI polls without sleeping unless a node runs more ranks than it
// has cores; we do the same with PADDLE_TCP_WAIT_SPIN_US unset: a driver polls its sockets for
// kAutoSpin before it sleeps when the ranks on this host (peers that published the same host
// address, threads-as-ranks included) are no more than the CPUs this process may run on, and
// never spins otherwise, where a spinning rank would hold the core its peer needs.
constexpr absl::Duration kAutoSpin = absl::Microseconds(100);

// The host part of a published "host:port" (SocketAddress's own parsing, IPv6 brackets included).
std::string HostOf(const std::string& address) {
  absl::StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  return parsed.ok() ? parsed->Host() : address;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::Duration AutomaticSpin(const std::vector<TcpMeshLink>& links, int rank) {
  const std::string host = HostOf(links[rank].address);
  int local = 0;
  for (const TcpMeshLink& link : links) {
    if (HostOf(link.address) == host) ++local;
  }
  const int cpus = UsableCpus();
  const absl::Duration spin = local <= cpus ? kAutoSpin : absl::ZeroDuration();
  PADDLE_LOG(DEBUG, NET) << local << " rank(s) on this host (" << host << "), " << cpus
                         << " usable CPU(s): waiters spin " << spin << " before sleeping";
  return spin;
}

class TcpTransport final : public Transport, private TcpChannel::Owner {
 public:
  TcpTransport(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  // Starts the loop and one channel per link.
  absl::Status Start(std::vector<TcpMeshLink> links, const TcpTuning& tuning);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "tcp"; }
  Channel& channel(int peer) override;
  void Abort(const absl::Status& cause) override;

 private:
  void Poison(const absl::Status& cause, int peer) override;
  absl::Status PoisonCause() const override;
  // Loop thread: fails every channel with the poison cause.
  void FailAll();

  const int rank_;
  const int world_size_;
  std::unique_ptr<TcpLoop> loop_;
  std::shared_ptr<TcpProgress> progress_;              // null when waiters do not drive
  std::vector<std::unique_ptr<TcpChannel>> channels_;  // null at rank_

  std::atomic<bool> poisoned_{false};
  std::atomic<bool> close_gracefully_{false};  // set by the destructor
  mutable std::mutex mu_;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);
};

TcpTransport::~TcpTransport() {
  if (loop_ != nullptr) {
    // Note [Graceful close] in tcp_channel.cc: a healthy transport says goodbye first. The
    // frames go out from FailAll, on the loop thread, after this transport is marked poisoned,
    // so whatever the peers answer cannot replace the cause below.
    bool idle = true;
    for (auto& channel : channels_) {
      if (channel != nullptr && !channel->Idle()) idle = false;
    }
    close_gracefully_.store(idle && PoisonCause().ok());
    Abort(absl::CancelledError(
        absl::StrCat("the transport of rank ", rank_, "/", world_size_, " was destroyed")));
    loop_->Stop();  // runs the FailAll() just posted, then joins
  }
  // Requests may outlive the transport and still hold the progress engine: it lets go of the
  // channels first (waiting for a driver to leave; the failed channels woke it).
  if (progress_ != nullptr) progress_->Detach();
  channels_.clear();
  loop_.reset();
}

absl::Status TcpTransport::Start(std::vector<TcpMeshLink> links, const TcpTuning& tuning) {
  ASSIGN_OR_RETURN(loop_, TcpLoop::Start(tuning.busy_poll));
  if (tuning.waiter_drives)
    progress_ = std::make_shared<TcpProgress>(loop_.get(), tuning.wait_spin);
  channels_.resize(world_size_);
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto link = std::make_shared<TcpLinkInfo>();
    link->rank = rank_;
    link->world_size = world_size_;
    link->peer = peer;
    link->peer_address = links[peer].address;
    channels_[peer] =
        std::make_unique<TcpChannel>(std::move(link), std::move(links[peer].socket), loop_.get(),
                                     static_cast<Owner*>(this), tuning.wait_spin, progress_);
  }
  for (auto& channel : channels_) {
    if (channel != nullptr) RETURN_IF_ERROR(channel->Start());
  }
  if (progress_ != nullptr) {
    std::vector<TcpChannel*> channels;
    for (auto& channel : channels_) channels.push_back(channel.get());
    progress_->Attach(channels);
  }
  return absl::OkStatus();
}

Channel& TcpTransport::channel(int peer) {
  PADDLE_CHECK(peer >= 0 && peer < world_size_ && peer != rank_)
      << "rank " << rank_ << "/" << world_size_ << " asked for the channel to peer " << peer
      << "; valid peers are 0.." << world_size_ - 1 << " except the rank itself";
  return *channels_[peer];
}

void TcpTransport::Abort(const absl::Status& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (poisoned_.load(std::memory_order_relaxed)) return;
    cause_ =
        cause.ok() ? absl::AbortedError("Abort() was called with an OK status") : CopyStatus(cause);
    poisoned_.store(true, std::memory_order_release);
  }
  PADDLE_LOG(INFO, NET) << "transport poisoned: " << PoisonCause();
  if (loop_ == nullptr) return;
  if (loop_->InLoopThread()) {
    FailAll();
  } else {
    loop_->Post([this] { FailAll(); });
  }
}

// Note [Naming the failed rank]. When rank X dies, a survivor Y poisons its transport and closes
// its links, so a third rank Z may hear of the failure from Y before it reads X's own close (X's
// link may still hold megabytes of data to read). Y's abort frame (tcp_wire.h) carries X's name
// when Y's link to Z is between messages; for when it is not, a lost link is reported together
// with every other link the kernel already sees closed, and X's close always precedes Y's.
void TcpTransport::Poison(const absl::Status& cause, int peer) {
  if (poisoned_.load(std::memory_order_acquire)) return;
  if (!absl::IsUnavailable(cause)) return Abort(cause);
  std::vector<std::string> down;
  for (int p = 0; p < world_size_; ++p) {
    if (p == peer || channels_[p] == nullptr || !channels_[p]->LinkDown()) continue;
    down.push_back(absl::StrCat("rank ", p, " (", channels_[p]->peer_address(), ")"));
  }
  if (down.empty()) return Abort(cause);
  Abort(absl::Status(cause.code(), absl::StrCat(cause.message(), "; the link(s) to ",
                                                absl::StrJoin(down, ", "), " closed too")));
}

absl::Status TcpTransport::PoisonCause() const {
  if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return CopyStatus(cause_);
}

void TcpTransport::FailAll() {
  absl::Status cause = PoisonCause();
  const bool graceful = close_gracefully_.load();
  for (auto& channel : channels_) {
    if (channel == nullptr) continue;
    if (graceful) channel->SendCloseFrame();
    channel->Fail(cause);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP transport: rank ", options.rank, " and world size ", options.world_size,
                     " do not fit: need world_size >= 1 and 0 <= rank < world_size"));
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP transport of rank ", options.rank, "/", options.world_size,
                     ": TransportOptions.store is null; the ranks exchange addresses through it"));
  }
  TcpTuning tuning = TuningFromEnv();
  TcpMeshOptions mesh;
  mesh.rank = options.rank;
  mesh.world_size = options.world_size;
  mesh.store = options.store.get();
  mesh.store_prefix = options.store_prefix;
  mesh.interface_name = options.interface_name;
  mesh.connect_timeout = options.connect_timeout;
  mesh.socket_buffer_bytes = tuning.socket_buffer_bytes;
  ASSIGN_OR_RETURN(std::vector<TcpMeshLink> links, ConnectFullMesh(mesh));
  if (tuning.wait_spin_auto) tuning.wait_spin = AutomaticSpin(links, options.rank);
  auto transport = std::make_unique<TcpTransport>(options.rank, options.world_size);
  RETURN_IF_ERROR(transport->Start(std::move(links), tuning));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace paddle
