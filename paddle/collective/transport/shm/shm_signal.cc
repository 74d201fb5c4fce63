// ShmSignal; see shm_signal.h.
//
// Note [Signal wake-ups]
// A sleeper must never miss the Post it waits for. The waiter increments `sleepers`, re-reads
// `value`, and only then calls FUTEX_WAIT with the value it read: the kernel sleeps only if the
// word still holds that value. The writer stores `value`, then reads `sleepers`, and calls
// FUTEX_WAKE if it is non-zero. Both sides use sequentially consistent operations, so either
// the writer sees the sleeper (and wakes it) or the waiter sees the new value (and does not
// sleep). The futex is not FUTEX_PRIVATE: the word is shared between processes. Sleeps are also
// capped at 50 ms, so the waiter checks the deadline and its peer's liveness even if a writer
// died between its store and its wake.
#include "paddle/collective/transport/shm/shm_signal.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/cpu_features.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

constexpr absl::Duration kMaxSleep = absl::Milliseconds(50);

// Note [Spinning politely]
// A wait that spins never calls sched_yield(). With other work queued on its CPU, a yield on
// Linux's EEVDF scheduler (6.6 and later) forfeits the rest of the yielder's slice: that work
// runs first, for up to a slice (~1 ms), and the post the yielder waits for lands long before it
// runs again (docs/performance-notes.md, "Spinning"). So the spin is pure (a pause between
// checks), bounded by `spin` and by the deadline, and a spin that runs out goes straight to the
// futex: a sleeper that the post wakes is queued as a waking task, a yielder is not. Waits that do
// not spin (ranks outnumber cores, a peer last seen on this CPU, spinning stopped paying) still
// yield once before they sleep: there the peer most likely waits for this very core, and the
// yield hands it over for far less than a futex wake-up.

// Note [Adaptive spin]
// Spinning pays only while the peer runs at the same time on another core. When the two ranks
// share a core (the machine is busy: Linux then tends to keep processes that wake each other on
// one CPU) every spin runs to its end and only delays the sleep, and the peer's run behind it;
// on a quiet machine the spin is ten times faster than sleeping (docs/performance-notes.md,
// "Spinning"). So each workspace and transport keeps a score of how its recent spins ended
// (ShmSpinHistory): +1 when the post came while spinning, -2 when the spin ran out. Below half the
// maximum, waits skip the spin (they still yield once before sleeping) except one probe in
// ShmSpinHistory::kProbeEvery, whose outcome can bring spinning back when the machine quietens. The
// node workspace also skips the spin outright when the peer it waits for last ran on the waiter's
// own CPU, and moves off that CPU when it keeps finding it there (Note [Ranks glued to one CPU]
// in node_workspace.cc).

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const struct timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

bool ShmSpinHistory::ShouldSpin() {
  if (score_.load(std::memory_order_relaxed) >= kSpinFrom) return true;
  return skipped_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == kProbeEvery - 1;
}

void ShmSpinHistory::Record(bool posted_while_spinning) {
  int score = score_.load(std::memory_order_relaxed);
  const int next = posted_while_spinning ? std::min(kMaxScore, score + 1) : std::max(0, score - 2);
  // A lost race only loses one step of history.
  score_.compare_exchange_strong(score, next, std::memory_order_relaxed);
}

void ShmSignal::Post(uint32_t v) {
  value.store(v, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&value);
}

absl::StatusOr<absl::Duration> DefaultShmSpin(int local_ranks) {
  // A transport or workspace created directly (not through a communicator, whose
  // ResolveSettings checks every variable first) meets a malformed value here.
  absl::StatusOr<std::optional<int64_t>> us = IntSetting("PADDLE_SHM_SPIN_US");
  if (!us.ok()) return us.status();
  if (us->has_value()) return absl::Microseconds(**us);
  return local_ranks <= CoresAvailable() ? absl::Microseconds(50) : absl::ZeroDuration();
}

int MoveOffCpu(int cpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(allowed), &allowed) != 0 ||
      !CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) {
    return cpu;
  }
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return cpu;
  const int now = sched_getcpu();
  // Restoring a superset of the mask just set only fails if the CPU set allowed to the process
  // changed in between (a cpuset moved under us): keep running, and say so.
  if (sched_setaffinity(0, sizeof(allowed), &allowed) != 0) {
    PADDLE_LOG(WARN, NET) << "restoring the CPU affinity after moving off CPU " << cpu
                          << " failed (errno " << errno << "); this thread stays off it";
  }
  return now;
}

absl::Status WaitSignal(ShmSignal& signal, uint32_t target, const Deadline& deadline,
                        const ShmWaitOptions& options) {
  if (SignalReached(signal.Load(), target)) return absl::OkStatus();
  // Spin first: a peer on another core usually posts within microseconds. The spin is pure and
  // goes straight to the futex when it runs out (Note [Spinning politely]).
  const bool spin = options.spin > absl::ZeroDuration() &&
                    (options.history == nullptr || options.history->ShouldSpin());
  if (spin) {
    const absl::Time spin_end = absl::Now() + std::min(options.spin, deadline.Remaining());
    while (true) {
      // 16 pauses take ~0.5 us here; reading the clock (vDSO, ~40 ns) after each batch keeps
      // the spin's length close to what was asked.
      for (int i = 0; i < 16; ++i) {
        if (SignalReached(signal.Load(), target)) {
          if (options.history != nullptr) options.history->Record(true);
          return absl::OkStatus();
        }
        CpuRelax();
      }
      if (absl::Now() >= spin_end) break;
    }
    if (options.history != nullptr) options.history->Record(false);
  } else {
    // Give the core away once before sleeping: the peer may be waiting for it, and a post that
    // lands before the futex wait spares both sides a wake-up (~30 us on the VM, against ~2 us
    // for the yield).
    sched_yield();
    if (SignalReached(signal.Load(), target)) return absl::OkStatus();
  }
  absl::Time next_check = absl::Now();
  while (true) {
    signal.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = signal.value.load(std::memory_order_seq_cst);
    if (SignalReached(seen, target)) {
      signal.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return absl::OkStatus();
    }
    const absl::Duration sleep = std::min(kMaxSleep, deadline.Remaining());
    if (sleep > absl::ZeroDuration()) FutexWait(&signal.value, seen, sleep);
    signal.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (SignalReached(signal.Load(), target)) return absl::OkStatus();
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(
          absl::StrCat("waited ", absl::FormatDuration(deadline.Elapsed()), " of ",
                       absl::FormatDuration(deadline.timeout())));
    }
    const absl::Time now = absl::Now();
    if (options.check && now >= next_check) {
      if (absl::Status s = options.check(); !s.ok()) return s;
      next_check = now + kMaxSleep;
    }
  }
}

}  // namespace paddle
