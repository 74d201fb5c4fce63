// NodeWorkspace; see node_workspace.h.
//
// Segment layout (all offsets 64-byte aligned, slots 4096-byte aligned):
//   WorkspaceHeader                      magic, local size, slot size, attach count
//   WorkspaceRankControl x local_size    progress signal, process identity, abort flag and cause,
//                                        the stamps of the slots' calls
//   slots: local rank r, buffer b at     slots + (2 r + b) * slot_bytes
//
// Note [Slot size]
// A round moves at most one slot per rank. Each round costs two or three synchronisations
// (~0.2-1 us each between cores that spin, a futex wake-up when ranks outnumber cores), so
// slots must be large enough for the copies to dominate; but every byte goes through a slot,
// so the slots of all local ranks (2 x local_size x slot_bytes) should stay in the last-level
// cache, leaving DRAM traffic to the user's buffers alone. 512 KiB measured best with a core per
// rank (docs/performance-notes.md, "Slot size"); with more ranks than cores the futex wake-ups
// dominate and larger slots win (Note [Sizes when ranks outnumber cores] in
// communicator_settings.cc).
#include "paddle/collective/intranode/node_workspace.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/shm/peer_process.h"
#include "paddle/collective/transport/shm/shm_signal.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

constexpr uint64_t kWorkspaceMagic = 0x5041444457533031ull;  // "PADDWS01"
constexpr size_t kCauseBytes = 384;

struct alignas(64) WorkspaceHeader {
  uint64_t magic;
  int32_t local_size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> attached;
};

struct alignas(64) WorkspaceRankControl {
  ShmSignal progress;
  ProcessIdentity identity;
  // The CPU this rank last ran on when it posted or began a wait (Note [Adaptive spin]).
  std::atomic<int32_t> cpu;
  std::atomic<uint32_t> aborted;  // 0, or 1 once `cause` is written
  std::atomic<uint32_t> cause_lock;
  uint32_t cause_code;  // absl::StatusCode of the cause
  char cause[kCauseBytes];
  alignas(64) uint8_t round_stamp[2][kRoundStampBytes];  // per slot buffer
};

namespace {

// Note [Ranks glued to one CPU]
// With a core per local rank but other work on the machine, the kernel often puts two ranks
// that wake each other on one CPU and keeps them there (likely: a wake-up pulls the wakee toward
// its waker, and the load balancer prefers to move tasks that have not run recently, i.e. the
// other work). The two then take turns on one core, each waiting hands the core over (no spin: Note
// [Adaptive spin] in shm_signal.cc), and a 4 KiB allreduce costs a context switch or two
// instead of a shared-cache round trip (docs/performance-notes.md, "Spinning"). So a rank that
// finds the peer it waits for on its own CPU kGluedWaits times in a row moves itself to another
// CPU it is allowed on (MoveOffCpu; its affinity is restored at once), and spins there. Only
// where spinning is on (DefaultShmSpin: a core per local rank); with more ranks than cores,
// sharing is the normal state.
constexpr int kGluedWaits = 4;

size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t ControlOffset() { return AlignUp(sizeof(WorkspaceHeader), 64); }
size_t SlotsOffset(int local_size) {
  return AlignUp(ControlOffset() + local_size * sizeof(WorkspaceRankControl), 4096);
}
size_t SegmentBytes(int local_size, size_t slot_bytes) {
  return SlotsOffset(local_size) + 2 * static_cast<size_t>(local_size) * slot_bytes;
}

}  // namespace

absl::StatusOr<size_t> SlotBytesFromEnv() {
  ASSIGN_OR_RETURN(std::optional<int64_t> bytes, IntSetting(kSlotBytesEnvVar));
  return static_cast<size_t>(bytes.value_or(0));
}

absl::StatusOr<std::unique_ptr<NodeWorkspace>> NodeWorkspace::Create(
    const NodeWorkspaceOptions& options) {
  const std::string where =
      absl::StrCat("node workspace of local rank ", options.local_rank, "/", options.local_size);
  if (options.local_size < 1 || options.local_rank < 0 ||
      options.local_rank >= options.local_size ||
      options.global_ranks.size() != static_cast<size_t>(options.local_size) ||
      options.slot_bytes < 4096 || options.slot_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": bad options (", options.global_ranks.size(),
                     " global ranks, slot_bytes ", options.slot_bytes, ")"));
  }
  if (options.local_size > 1 && options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": needs a store"));
  }
  absl::StatusOr<absl::Duration> spin = DefaultShmSpin(options.local_size);
  if (!spin.ok()) return Annotate(spin.status(), where);
  const size_t bytes = SegmentBytes(options.local_size, options.slot_bytes);
  const std::string name_key = absl::StrCat(options.store_prefix, "/segment");
  std::unique_ptr<ShmSegment> segment;
  if (options.local_rank == 0) {
    absl::StatusOr<std::unique_ptr<ShmSegment>> created = ShmSegment::Create("ws", bytes);
    if (!created.ok()) return Annotate(created.status(), where);
    segment = *std::move(created);
    auto* header = new (segment->data()) WorkspaceHeader();
    header->magic = kWorkspaceMagic;
    header->local_size = options.local_size;
    header->slot_bytes = options.slot_bytes;
    header->attached.store(0);
    if (options.local_size > 1) {
      RETURN_IF_ERROR(Annotate(options.store->Set(name_key, segment->name()),
                               absl::StrCat(where, ": publishing the segment name")));
    }
  } else {
    absl::StatusOr<std::string> name = options.store->Get(name_key, options.connect_timeout);
    if (!name.ok()) {
      return Annotate(name.status(),
                      absl::StrCat(where, ": waiting for local rank 0 (rank ",
                                   options.global_ranks[0], ") to publish the segment"));
    }
    absl::StatusOr<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(*name, bytes);
    if (absl::IsFailedPrecondition(opened.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": ", opened.status().message(), "; this rank expects ",
                       options.local_size, " local ranks with slots of ", options.slot_bytes,
                       " bytes: set ", kSlotBytesEnvVar, " alike on every rank"));
    }
    if (!opened.ok()) return Annotate(opened.status(), where);
    segment = *std::move(opened);
    const auto* header = static_cast<const WorkspaceHeader*>(segment->data());
    if (header->magic != kWorkspaceMagic || header->local_size != options.local_size ||
        header->slot_bytes != options.slot_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": segment ", *name, " was made for ", header->local_size,
                       " local ranks with slots of ", header->slot_bytes,
                       " bytes, this rank expects ", options.local_size, " and ",
                       options.slot_bytes, " (set ", kSlotBytesEnvVar, " alike on every rank)"));
    }
  }
  std::unique_ptr<NodeWorkspace> ws(new NodeWorkspace(options, std::move(segment), *spin));
  WorkspaceRankControl& me = ws->control(options.local_rank);
  me.identity = ProcessIdentity::Self();
  // Touch this rank's slots now, so their page faults happen here and not in the first round.
  std::memset(ws->slot(options.local_rank, 0), 0, 2 * options.slot_bytes);
  ws->header_->attached.fetch_add(1, std::memory_order_acq_rel);

  if (options.local_rank == 0 && options.local_size > 1) {
    // Stop sharing once everybody has mapped it (nobody can open it afterwards).
    const Deadline deadline = Deadline::After(options.connect_timeout);
    while (ws->header_->attached.load(std::memory_order_acquire) <
           static_cast<uint32_t>(options.local_size)) {
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": only ", ws->header_->attached.load(), " of ", options.local_size,
                         " local ranks opened segment ", ws->segment_->name(), " within ",
                         absl::FormatDuration(options.connect_timeout),
                         "; the others did not start or could not map it (see their logs); ",
                         TimeoutHint(TimeoutKind::kConnect, options.connect_timeout)));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  ws->segment_->StopSharing();
  return ws;
}

NodeWorkspace::NodeWorkspace(const NodeWorkspaceOptions& options,
                             std::unique_ptr<ShmSegment> segment, absl::Duration spin)
    : options_(options),
      segment_(std::move(segment)),
      header_(static_cast<WorkspaceHeader*>(segment_->data())),
      slots_(static_cast<uint8_t*>(segment_->data()) + SlotsOffset(options.local_size)),
      spin_(spin) {}

NodeWorkspace::~NodeWorkspace() = default;

WorkspaceRankControl& NodeWorkspace::control(int local) const {
  auto* base = reinterpret_cast<uint8_t*>(segment_->data()) + ControlOffset();
  return reinterpret_cast<WorkspaceRankControl*>(base)[local];
}

uint8_t* NodeWorkspace::slot(int local, int buffer) const {
  return slots_ +
         (2 * static_cast<size_t>(local) + static_cast<size_t>(buffer)) * options_.slot_bytes;
}

uint8_t* NodeWorkspace::round_stamp(int local, int buffer) const {
  return control(local).round_stamp[buffer];
}

void NodeWorkspace::Post(uint32_t value) {
  WorkspaceRankControl& self = control(options_.local_rank);
  self.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  self.progress.Post(value);
}

std::string NodeWorkspace::DescribePeer(int local) const {
  return absl::StrCat("rank ", global_rank(local), " (", control(local).identity.ToString(),
                      ", local rank ", local, " of ", options_.local_size, " on this host)");
}

absl::Status NodeWorkspace::CheckPeer(int local) const {
  const WorkspaceRankControl& self = control(options_.local_rank);
  if (self.aborted.load(std::memory_order_acquire) != 0) {
    // The cause as it was given (a Communicator::Abort with kCancelled stays kCancelled).
    return absl::Status(static_cast<absl::StatusCode>(self.cause_code), self.cause);
  }
  const WorkspaceRankControl& peer = control(local);
  if (peer.aborted.load(std::memory_order_acquire) != 0) {
    return absl::UnavailableError(
        absl::StrCat(DescribePeer(local), " failed and left the group: ", peer.cause));
  }
  if (!peer.identity.IsAlive()) {
    return absl::UnavailableError(
        absl::StrCat(DescribePeer(local),
                     " exited or was killed while this rank waited for it (see its log "
                     "for why)"));
  }
  return absl::OkStatus();
}

absl::Status NodeWorkspace::WaitFor(int local, uint32_t target, const Deadline& deadline) {
  ShmSignal& progress = control(local).progress;
  if (SignalReached(progress.Load(), target)) return absl::OkStatus();
  // A peer last seen on this very CPU cannot post while this rank spins there: skip the spin
  // (Note [Adaptive spin] in shm_signal.cc), and if that keeps happening, move off that CPU
  // (Note [Ranks glued to one CPU]).
  int cpu = sched_getcpu();
  bool same_cpu = cpu >= 0 && control(local).cpu.load(std::memory_order_relaxed) == cpu;
  if (!same_cpu || spin_ == absl::ZeroDuration()) {
    same_cpu_waits_ = 0;
  } else if (++same_cpu_waits_ >= kGluedWaits) {
    same_cpu_waits_ = 0;
    cpu = MoveOffCpu(cpu);
    same_cpu = control(local).cpu.load(std::memory_order_relaxed) == cpu;
  }
  control(options_.local_rank).cpu.store(cpu, std::memory_order_relaxed);
  ShmWaitOptions wait;
  wait.spin = same_cpu ? absl::ZeroDuration() : spin_;
  wait.history = &spin_history_;
  wait.check = [this, local] { return CheckPeer(local); };
  absl::Status s = WaitSignal(progress, target, deadline, wait);
  // Note [Drain before blaming] (shm_transport.cc): a peer posts its progress before it raises
  // its flag on teardown, but the check may read the flag after a stale progress value; a step
  // the peer did reach is not failed because the peer left afterwards.
  if (!s.ok() && SignalReached(progress.Load(), target)) return absl::OkStatus();
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat(
        DescribePeer(local), " did not arrive at step ", target, " (it is at ", progress.Load(),
        "): ", s.message(), "; it is stuck or still busy with earlier work"));
  }
  return s;
}

absl::Status NodeWorkspace::WaitForPeers(uint32_t target, const Deadline& deadline) {
  for (int i = 1; i < options_.local_size; ++i) {
    // Start with the next rank: peers usually arrive in that order.
    const int local = (options_.local_rank + i) % options_.local_size;
    RETURN_IF_ERROR(WaitFor(local, target, deadline));
  }
  return absl::OkStatus();
}

void NodeWorkspace::Abort(const absl::Status& cause) {
  WorkspaceRankControl& self = control(options_.local_rank);
  uint32_t unlocked = 0;
  if (!self.cause_lock.compare_exchange_strong(unlocked, 1)) return;  // first cause wins
  const std::string text(cause.message().substr(0, kCauseBytes - 1));
  std::memcpy(self.cause, text.data(), text.size());
  self.cause[text.size()] = '\0';
  self.cause_code = static_cast<uint32_t>(cause.code());
  self.aborted.store(1, std::memory_order_release);
  // Wake whoever sleeps on this rank's progress; they then see the flag.
  self.progress.Post(self.progress.Load());
}

}  // namespace paddle
