// TcpTransport: owns the I/O loop and the channels, and poisons them all on the first failure.
#include "paddle/collective/transport/tcp/tcp_transport.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/tcp/tcp_channel.h"
#include "paddle/collective/transport/tcp/tcp_loop.h"
#include "paddle/collective/transport/tcp/tcp_mesh.h"
#include "paddle/collective/transport/tcp/tcp_progress.h"
#include "paddle/collective/transport/tcp/tcp_tuning.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

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
    // Note [Graceful close] in tcp_channel_close.cc: a healthy transport says goodbye first. The
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
  // Note [Lingering close] in tcp_channel_close.cc, for every channel within one kAbortLinger.
  const Deadline linger = Deadline::After(kAbortLinger);
  for (auto& channel : channels_) {
    if (channel != nullptr) channel->Linger(linger);
  }
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
    channels_[peer] = std::make_unique<TcpChannel>(
        std::move(link), std::move(links[peer].socket), loop_.get(), static_cast<Owner*>(this),
        tuning.wait_spin, progress_, tuning.max_unexpected_bytes);
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
  ASSIGN_OR_RETURN(TcpTuning tuning, TuningFromEnv());
  TcpMeshOptions mesh;
  mesh.rank = options.rank;
  mesh.world_size = options.world_size;
  mesh.store = options.store.get();
  mesh.store_prefix = options.store_prefix;
  mesh.interface_name = options.interface_name;
  mesh.connect_timeout = options.connect_timeout;
  mesh.socket_buffer_bytes = tuning.socket_buffer_bytes;
  // The job token the launcher hands every worker (the TCP store reads the same variable).
  mesh.job_token = StringSetting("PADDLE_STORE_TOKEN").value_or("");
  ASSIGN_OR_RETURN(std::vector<TcpMeshLink> links, ConnectFullMesh(mesh));
  if (tuning.wait_spin_auto) {
    std::vector<std::string> addresses;
    addresses.reserve(links.size());
    for (const TcpMeshLink& link : links) addresses.push_back(link.address);
    tuning.wait_spin = AutomaticWaitSpin(addresses, options.rank, UsableCpus());
  }
  auto transport = std::make_unique<TcpTransport>(options.rank, options.world_size);
  RETURN_IF_ERROR(transport->Start(std::move(links), tuning));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace paddle
