// ShmTransport: setup through the store, the progress engine shared by waiters and the
// background thread, and poisoning.
//
// Note [Shm setup]. Each rank, within options.connect_timeout:
//  0. learns the job nonce (Note [Shm segment owner]);
//  1. creates its segment (its control block and one inbound ring per peer) and publishes, under
//     <prefix>/shm/info/<rank>: its host identity, pid and process start time, the segment's
//     name, and the address and value of its CMA probe word;
//  2. reads every peer's entry; if the host identities differ, fails on every rank alike with
//     kFailedPrecondition naming each rank's host (the job needs PADDLE_TRANSPORT=tcp or auto);
//  3. opens every peer's segment (ShmSegment::Open checks its name, owner and size, then the
//     control block's stamp is checked: Note [Untrusted rings] in shm_ring.h) and probes whether
//     it can read each peer with process_vm_readv (the result goes into its own control block's
//     `cma_from`, which the peer reads to choose between CMA and streaming for what it sends
//     here);
//  4. publishes <prefix>/shm/opened/<rank> and waits for every rank's, then stops sharing its
//     segment: from then on the memory lives only in the mappings (segments have no name
//     anywhere, so no death leaks one: Note [Nameless segments] in shm_segment.cc).
//
// Note [Shm segment owner]. ShmSegment::Open refuses a segment of another user, but a segment of
// this user may still be another job's: a store and prefix shared by two jobs, or an entry an
// earlier job left in a store that outlived it, names a live, well-stamped segment whose rings
// this rank would then write into. So every control block also carries the job nonce and the
// creating process (pid and start time), and an opener checks both: the nonce against its own
// (rank 0 draws 64 random bits and publishes them under <prefix>/shm/job/0; every rank mixes
// them with the job token, PADDLE_STORE_TOKEN, when one is set, so jobs with different tokens
// never match even on one key), and the creator against the pid and start time of the entry
// that published the segment's name.
#include "paddle/collective/transport/shm/shm_transport.h"

#include <sys/mman.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "paddle/collective/store/hmac_sha256.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/shm/cma.h"
#include "paddle/collective/transport/shm/host_identity.h"
#include "paddle/collective/transport/shm/peer_process.h"
#include "paddle/collective/transport/shm/shm_channel.h"
#include "paddle/collective/transport/shm/shm_segment.h"
#include "paddle/collective/transport/shm/shm_signal.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

// How often a waiter woken by traffic (so never asleep for the 50 ms after which WaitSignal calls
// its check) still checks its peers' abort flags and liveness.
constexpr absl::Duration kHealthCheckInterval = absl::Milliseconds(50);
// While some thread waits, the background thread only looks this often whether that is still so.
constexpr absl::Duration kBackgroundNap = absl::Milliseconds(1);

struct PeerInfo {
  std::string host;
  ProcessIdentity process;
  std::string segment;
  uint64_t probe_address = 0;
  uint64_t probe_value = 0;
};

std::string EncodeInfo(const PeerInfo& info) {
  return absl::StrCat(info.host, "\t", info.process.pid, "\t", info.process.start_ticks, "\t",
                      info.segment, "\t", info.probe_address, "\t", info.probe_value);
}

bool DecodeInfo(const std::string& text, PeerInfo* info) {
  std::vector<std::string> parts = absl::StrSplit(text, '\t');
  return parts.size() == 6 && ((info->host = parts[0]), true) &&
         absl::SimpleAtoi(parts[1], &info->process.pid) &&
         absl::SimpleAtoi(parts[2], &info->process.start_ticks) &&
         ((info->segment = parts[3]), true) && absl::SimpleAtoi(parts[4], &info->probe_address) &&
         absl::SimpleAtoi(parts[5], &info->probe_value);
}

absl::Status CopyStatus(const absl::Status& status) {
  return status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
}

// Note [Prefaulted rings]
// A ring's pages are mapped on first touch, in each process that maps the segment: the first
// pass of messages through a 1 MiB ring takes a page fault (and its TLB flushes) every 4 KiB, on
// both sides, which made the first calls on a new transport several times slower than the
// later ones (docs/performance-notes.md, "Prefaulted rings"). So each rank populates the page
// tables of the rings it uses (its inbound rings in its own segment, its outbound ring in each
// peer's) once, when it connects. MADV_POPULATE_WRITE (Linux 5.14) maps the pages without writing
// them, so a peer that already sends is not disturbed; an older kernel rejects it and the pages
// are faulted in on first use, as before.
void PrefaultRing(void* ring) {
  const uintptr_t page = 4096;
  const uintptr_t start = reinterpret_cast<uintptr_t>(ring) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(ring) + kShmRingStride;
  (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
}

// The state channels and requests share; outlives the Transport while requests hold it.
class ShmEngine final : public ShmChannel::Owner, public std::enable_shared_from_this<ShmEngine> {
 public:
  ShmEngine(int rank, int world_size, absl::Duration spin)
      : rank_(rank), world_size_(world_size), spin_(spin) {}
  ShmEngine(const ShmEngine&) = delete;
  ShmEngine& operator=(const ShmEngine&) = delete;

  // Note [Shm setup].
  absl::Status Connect(const TransportOptions& options);

  absl::Status PoisonCause() const override;
  void Poison(const absl::Status& cause) override;
  absl::Status Await(const ShmOp& op, const Deadline& deadline) override;
  void WakeLocal() override { RingDoorbell(control_->doorbell); }
  std::shared_ptr<Owner> Handle() override { return shared_from_this(); }

  // Poisons the transport if a peer aborted or no longer runs; returns the poison cause.
  absl::Status CheckHealth();
  void ProgressAll();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  ShmChannel* channel(int peer) { return channels_[peer].get(); }
  ShmControl* control() { return control_; }
  int waiters() const { return waiters_.load(std::memory_order_acquire); }

 private:
  std::string Key(absl::string_view what, int rank) const {
    return absl::StrCat(prefix_, "/shm/", what, "/", rank);
  }
  // "pid 1234 on myhost": the host name only; the full identity (boot id, namespaces) is noise
  // in every error message and appears in the set-up errors that need it.
  std::string Address(int peer) const {
    const std::string& host = peers_[peer].host;
    return absl::StrCat("pid ", peers_[peer].process.pid, " on ", host.substr(0, host.find('/')));
  }
  ErrorContext Context() const { return ErrorContext().Rank(rank_, world_size_); }
  // Note [Shm segment owner]: the job nonce, published by rank 0.
  absl::StatusOr<uint64_t> AgreeJobNonce(Store& store, const Deadline& deadline,
                                         absl::Duration timeout);
  absl::Status ReadPeers(Store& store, const Deadline& deadline, absl::Duration timeout);
  absl::Status CheckOneHost() const;
  absl::Status WaitOpened(Store& store, const Deadline& deadline, absl::Duration timeout);
  absl::Status PeerAborted(int peer) const;
  absl::Status PeerGone(int peer) const;

  const int rank_;
  const int world_size_;
  const absl::Duration spin_;
  ShmSpinHistory spin_history_;
  std::string prefix_;
  std::vector<PeerInfo> peers_;
  // Segments before channels: the channels point into them and are destroyed first.
  std::unique_ptr<ShmSegment> own_segment_;
  std::vector<std::unique_ptr<ShmSegment>> peer_segments_;
  ShmControl* control_ = nullptr;
  std::vector<std::unique_ptr<ShmChannel>> channels_;  // null at rank_

  std::atomic<int> waiters_{0};
  std::atomic<bool> poisoned_{false};
  mutable std::mutex mu_;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);
};

absl::Status ShmEngine::Connect(const TransportOptions& options) {
  const Deadline deadline = Deadline::After(options.connect_timeout);
  Store& store = *options.store;
  prefix_ = options.store_prefix;
  const size_t bytes = ShmSegmentBytes(world_size_);
  ASSIGN_OR_RETURN(const uint64_t job_nonce,
                   AgreeJobNonce(store, deadline, options.connect_timeout));
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Create(absl::StrCat("shm-r", rank_), bytes);
  if (!segment.ok()) return Context().Wrap(segment.status());
  own_segment_ = std::move(*segment);
  control_ = static_cast<ShmControl*>(own_segment_->data());
  const ProcessIdentity me = ProcessIdentity::Self();
  StampShmControl(*control_, world_size_, {job_nonce, me.pid, me.start_ticks});
  std::random_device random;
  control_->probe = ((static_cast<uint64_t>(random()) << 32) | random()) | 1;

  PeerInfo self;
  self.host = HostIdentity();
  self.process = ProcessIdentity::Self();
  self.segment = own_segment_->name();
  self.probe_address = reinterpret_cast<uint64_t>(&control_->probe);
  self.probe_value = control_->probe;
  absl::Status published = store.Set(Key("info", rank_), EncodeInfo(self));
  if (!published.ok()) {
    return Context().Wrap(Annotate(
        published, absl::StrCat("publishing this rank's segment under ", Key("info", rank_))));
  }
  RETURN_IF_ERROR(ReadPeers(store, deadline, options.connect_timeout));
  RETURN_IF_ERROR(CheckOneHost());

  ASSIGN_OR_RETURN(const bool cma, CmaEnabledByEnv());
  peer_segments_.resize(world_size_);
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(peers_[p].segment, bytes);
    if (!opened.ok()) return Context().Peer(p, Address(p)).Wrap(opened.status());
    peer_segments_[p] = std::move(*opened);
    absl::Status stamp = CheckShmControl(
        *static_cast<const ShmControl*>(peer_segments_[p]->data()), world_size_, peers_[p].segment,
        {job_nonce, peers_[p].process.pid, peers_[p].process.start_ticks});
    if (!stamp.ok()) return Context().Peer(p, Address(p)).Wrap(stamp);
    std::string why;
    const bool readable = cma && CmaProbe(peers_[p].process.pid, peers_[p].probe_address,
                                          peers_[p].probe_value, &why);
    if (cma && !readable) {
      PADDLE_LOG(WARN, NET) << "cannot read rank " << p << " (" << Address(p)
                            << ") with process_vm_readv: " << why
                            << "; its large messages to this rank go through the ring";
    }
    control_->cma_from[p] = readable ? 1 : 0;
  }
  published = store.Set(Key("opened", rank_), "1");
  if (!published.ok()) return Context().Wrap(published);
  RETURN_IF_ERROR(WaitOpened(store, deadline, options.connect_timeout));
  own_segment_->StopSharing();

  channels_.resize(world_size_);
  char* own = static_cast<char*>(own_segment_->data());
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    char* theirs = static_cast<char*>(peer_segments_[p]->data());
    auto* peer_control = reinterpret_cast<ShmControl*>(theirs);
    ShmLinkInfo link{rank_, world_size_, p, peers_[p].process.pid, Address(p)};
    channels_[p] = std::make_unique<ShmChannel>(
        std::move(link), this, ShmRing(own + kShmControlBytes + p * kShmRingStride),
        ShmRing(theirs + kShmControlBytes + rank_ * kShmRingStride), peer_control,
        peer_control->cma_from[rank_] != 0);
    PrefaultRing(own + kShmControlBytes + p * kShmRingStride);  // Note [Prefaulted rings]
    PrefaultRing(theirs + kShmControlBytes + rank_ * kShmRingStride);
  }
  PADDLE_LOG(DEBUG, NET) << "shared-memory transport connected to " << world_size_ - 1
                         << " peer(s) in " << deadline.Elapsed();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ShmEngine::AgreeJobNonce(Store& store, const Deadline& deadline,
                                                  absl::Duration timeout) {
  // Note [Shm segment owner].
  const std::string key = Key("job", 0);
  std::string text;
  if (rank_ == 0) {
    std::random_device random;
    text = absl::StrCat((static_cast<uint64_t>(random()) << 32) | random());
    absl::Status published = store.Set(key, text);
    if (!published.ok()) {
      return Context().Wrap(
          Annotate(published, absl::StrCat("publishing the job nonce under ", key)));
    }
  } else {
    absl::StatusOr<std::string> got = store.Get(key, deadline.Remaining());
    if (!got.ok()) {
      return Context()
          .Peer(0)
          .Op("connect")
          .Waited(deadline.Elapsed(), timeout)
          .Hint(absl::StrCat("is rank 0 running with the same store and prefix? ",
                             TimeoutHint(TimeoutKind::kConnect, timeout)))
          .Wrap(Annotate(got.status(),
                         absl::StrCat("waiting for rank 0 to publish the job nonce under ", key)));
    }
    text = *std::move(got);
  }
  uint64_t nonce = 0;
  if (!absl::SimpleAtoi(text, &nonce)) {
    return Context().Peer(0).Wrap(absl::FailedPreconditionError(
        absl::StrCat("store key ", key, " holds '", text,
                     "', not a job nonce: another program uses this store prefix; choose another "
                     "TransportOptions.store_prefix")));
  }
  const std::optional<std::string> token = StringSetting("PADDLE_STORE_TOKEN");
  if (token.has_value()) {
    const Sha256Digest mixed = HmacSha256(*token, absl::StrCat("shm job nonce ", nonce));
    std::memcpy(&nonce, DigestBytes(mixed).data(), sizeof(nonce));
  }
  return nonce;
}

absl::Status ShmEngine::ReadPeers(Store& store, const Deadline& deadline, absl::Duration timeout) {
  peers_.resize(world_size_);
  for (int p = 0; p < world_size_; ++p) {
    absl::StatusOr<std::string> text = store.Get(Key("info", p), deadline.Remaining());
    if (!text.ok()) {
      return Context()
          .Peer(p)
          .Op("connect")
          .Waited(deadline.Elapsed(), timeout)
          .Hint(absl::StrCat("is rank ", p, " running with the same store and prefix? ",
                             TimeoutHint(TimeoutKind::kConnect, timeout)))
          .Wrap(Annotate(text.status(), absl::StrCat("waiting for rank ", p,
                                                     " to publish its shared-memory segment "
                                                     "under ",
                                                     Key("info", p))));
    }
    if (!DecodeInfo(*text, &peers_[p])) {
      return Context().Peer(p).Wrap(absl::FailedPreconditionError(absl::StrCat(
          "store key ", Key("info", p), " holds '", *text,
          "', not a shared-memory transport entry: another program uses this store prefix; "
          "choose another TransportOptions.store_prefix")));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmEngine::CheckOneHost() const {
  bool one_host = true;
  std::vector<std::string> hosts;
  for (int p = 0; p < world_size_; ++p) {
    one_host = one_host && peers_[p].host == peers_[0].host;
    hosts.push_back(
        absl::StrCat("rank ", p, " (pid ", peers_[p].process.pid, ") on '", peers_[p].host, "'"));
  }
  if (one_host) return absl::OkStatus();
  return Context()
      .Hint(
          "use PADDLE_TRANSPORT=tcp, or PADDLE_TRANSPORT=auto to use shared memory within a host "
          "and TCP between hosts")
      .Wrap(absl::FailedPreconditionError(absl::StrCat(
          "the shared-memory transport needs every rank on one host (one kernel and one "
          "/dev/shm), but the ranks run on different hosts: ",
          absl::StrJoin(hosts, ", "))));
}

absl::Status ShmEngine::WaitOpened(Store& store, const Deadline& deadline, absl::Duration timeout) {
  std::vector<std::string> keys;
  for (int p = 0; p < world_size_; ++p) keys.push_back(Key("opened", p));
  absl::Status opened = store.Wait(keys, deadline.Remaining());
  if (opened.ok()) return absl::OkStatus();
  std::vector<int> missing;
  for (int p = 0; p < world_size_; ++p) {
    absl::StatusOr<bool> there = store.Check({keys[p]});
    if (!there.ok() || !*there) missing.push_back(p);
  }
  return Context()
      .Op("connect")
      .Waited(deadline.Elapsed(), timeout)
      .Hint(TimeoutHint(TimeoutKind::kConnect, timeout))
      .Wrap(Annotate(opened, absl::StrCat("waiting for rank(s) [", absl::StrJoin(missing, ", "),
                                          "] to open the shared-memory segments")));
}

absl::Status ShmEngine::PoisonCause() const {
  if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return CopyStatus(cause_);
}

void ShmEngine::Poison(const absl::Status& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (poisoned_.load(std::memory_order_relaxed)) return;
    cause_ =
        cause.ok() ? absl::AbortedError("Abort() was called with an OK status") : CopyStatus(cause);
    poisoned_.store(true, std::memory_order_release);
  }
  const absl::Status poison = PoisonCause();
  PADDLE_LOG(INFO, NET) << "transport poisoned: " << poison;
  if (control_ == nullptr) return;
  // Tell the peers why (Note [Doorbell]: they wake and find the flag), then fail everything here.
  const absl::string_view text = poison.message().substr(0, kShmAbortTextBytes - 1);
  std::memcpy(control_->abort_text, text.data(), text.size());
  control_->abort_text[text.size()] = '\0';
  control_->abort_code.store(static_cast<int32_t>(poison.code()), std::memory_order_relaxed);
  control_->aborted.store(1, std::memory_order_seq_cst);
  RingDoorbell(control_->doorbell);
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_ || peer_segments_.size() <= static_cast<size_t>(p)) continue;
    if (peer_segments_[p] != nullptr) {
      RingDoorbell(static_cast<ShmControl*>(peer_segments_[p]->data())->doorbell);
    }
  }
  for (auto& channel : channels_) {
    if (channel != nullptr) channel->Fail(poison);
  }
}

absl::Status ShmEngine::PeerAborted(int peer) const {
  const auto* theirs = static_cast<const ShmControl*>(peer_segments_[peer]->data());
  const int32_t code = theirs->abort_code.load(std::memory_order_relaxed);
  // The peer's cause travels as its text. The code says what happened to this rank: the peer is
  // gone (kUnavailable) when it lost a peer itself or was destroyed, else it aborted (kAborted).
  const bool gone = code == static_cast<int32_t>(absl::StatusCode::kUnavailable) ||
                    code == static_cast<int32_t>(absl::StatusCode::kCancelled);
  std::string text(theirs->abort_text, strnlen(theirs->abort_text, kShmAbortTextBytes));
  return Context()
      .Peer(peer, Address(peer))
      .Wrap(absl::Status(gone ? absl::StatusCode::kUnavailable : absl::StatusCode::kAborted,
                         absl::StrCat("peer rank ", peer, " (", Address(peer),
                                      ") aborted its transport: ", text)));
}

absl::Status ShmEngine::PeerGone(int peer) const {
  return Context()
      .Peer(peer, Address(peer))
      .Hint(absl::StrCat("rank ", peer, " exited, crashed or was killed; its log says why"))
      .Wrap(absl::UnavailableError(
          absl::StrCat("peer rank ", peer, " (", Address(peer), ") is no longer running")));
}

absl::Status ShmEngine::CheckHealth() {
  if (poisoned_.load(std::memory_order_acquire)) return PoisonCause();
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    const auto* theirs = static_cast<const ShmControl*>(peer_segments_[p]->data());
    // Note [Drain before blaming]: a peer that finished its part and then destroyed its
    // transport (kCancelled "was destroyed") or exited may have delivered everything an op here
    // still waits for; its flag can be seen before this rank moved those bytes. Progress the
    // channels first, so such ops complete; only the ops still pending afterwards, which need
    // something the peer will never send, fail. The peer wrote its data before its flag (the flag
    // is stored seq_cst and read acquire here), so one pass sees all of it. A peer that aborted
    // in the middle of a copy is still caught by the channel (the check after a CMA read).
    if (theirs->aborted.load(std::memory_order_acquire) != 0) {
      ProgressAll();
      Poison(PeerAborted(p));
      break;
    }
    if (!peers_[p].process.IsAlive()) {
      ProgressAll();
      Poison(PeerGone(p));
      break;
    }
  }
  return PoisonCause();
}

void ShmEngine::ProgressAll() {
  for (auto& channel : channels_) {
    if (channel == nullptr) continue;
    bool completed = false;
    absl::Status error = channel->Progress(&completed);
    if (!error.ok()) Poison(error);
  }
}

absl::Status ShmEngine::Await(const ShmOp& op, const Deadline& deadline) {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  ShmWaitOptions options;
  options.spin = spin_;
  options.history = &spin_history_;
  options.check = [this] { return CheckHealth(); };
  absl::Status result;
  absl::Time next_check = absl::Now() + kHealthCheckInterval;
  while (!op.IsCompleted()) {
    const uint32_t seen = control_->doorbell.Load();
    ProgressAll();
    if (op.IsCompleted()) break;
    if (!PoisonCause().ok()) break;  // Fail() completed the op, unless it raced: see below
    absl::Status waited = WaitSignal(control_->doorbell, seen + 1, deadline, options);
    if (!waited.ok() && PoisonCause().ok() && deadline.Expired()) {
      // A wait shorter than kHealthCheckInterval (a caller that waits in slices) still looks at
      // its peers before it reports the timeout; a peer's abort ends the loop above.
      if (!CheckHealth().ok()) continue;
      result = waited;
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= next_check) {
      (void)CheckHealth();
      next_check = now + kHealthCheckInterval;
    }
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  if (!op.IsCompleted() && result.ok()) result = PoisonCause();
  return result;
}

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(std::shared_ptr<ShmEngine> engine) : engine_(std::move(engine)) {
    if (engine_->world_size() > 1) background_ = std::thread([this] { BackgroundLoop(); });
  }
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return engine_->rank(); }
  int world_size() const override { return engine_->world_size(); }
  std::string name() const override { return "shm"; }
  Channel& channel(int peer) override;
  void Abort(const absl::Status& cause) override { engine_->Poison(cause); }

 private:
  // Drives progress while no thread waits (see shm_transport.h).
  void BackgroundLoop();

  std::shared_ptr<ShmEngine> engine_;
  std::thread background_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

ShmTransport::~ShmTransport() {
  engine_->Poison(absl::CancelledError(
      absl::StrCat("the transport of rank ", rank(), "/", world_size(), " was destroyed")));
  if (background_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    engine_->WakeLocal();
    background_.join();
  }
}

Channel& ShmTransport::channel(int peer) {
  PADDLE_CHECK(peer >= 0 && peer < world_size() && peer != rank())
      << "rank " << rank() << "/" << world_size() << " asked for the channel to peer " << peer
      << "; valid peers are 0.." << world_size() - 1 << " except the rank itself";
  return *engine_->channel(peer);
}

void ShmTransport::BackgroundLoop() {
  ShmWaitOptions options;
  options.spin = absl::ZeroDuration();
  options.check = [this] {
    return stop_.load() ? absl::CancelledError("stopping") : absl::OkStatus();
  };
  ShmSignal& doorbell = engine_->control()->doorbell;
  while (!stop_.load()) {
    if (!engine_->PoisonCause().ok() || engine_->waiters() > 0) {
      // A failed transport has nothing left to move; a waiter drives progress itself.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoNanoseconds(kBackgroundNap),
                   [this] { return stop_.load(); });
      continue;
    }
    const uint32_t seen = doorbell.Load();
    engine_->ProgressAll();
    (void)WaitSignal(doorbell, seen + 1, Deadline::After(absl::Seconds(1)), options);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateShmTransport(const TransportOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory transport: rank ", options.rank, " and world size ", options.world_size,
        " do not fit: need world_size >= 1 and 0 <= rank < world_size"));
  }
  if (options.world_size > kShmMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory transport: world size ",
                                                   options.world_size, " is more than the ",
                                                   kShmMaxRanks, " ranks one host supports"));
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory transport of rank ", options.rank, "/", options.world_size,
        ": TransportOptions.store is null; the ranks exchange segment names through it"));
  }
  absl::StatusOr<absl::Duration> spin = DefaultShmSpin(options.world_size);
  if (!spin.ok()) {
    return Annotate(spin.status(), absl::StrCat("shared-memory transport of rank ", options.rank,
                                                "/", options.world_size));
  }
  auto engine = std::make_shared<ShmEngine>(options.rank, options.world_size, *spin);
  if (options.world_size > 1) RETURN_IF_ERROR(engine->Connect(options));
  return std::unique_ptr<Transport>(std::make_unique<ShmTransport>(std::move(engine)));
}

}  // namespace paddle
