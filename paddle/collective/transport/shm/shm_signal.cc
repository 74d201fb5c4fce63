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

namespace paddle {
namespace {

constexpr absl::Duration kMaxSleep = absl::Milliseconds(50);

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

int CoresAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

void ShmSignal::Post(uint32_t v) {
  value.store(v, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&value);
}

absl::Duration DefaultShmSpin(int local_ranks) {
  if (const char* env = std::getenv("PADDLE_SHM_SPIN_US"); env != nullptr && *env != '\0') {
    int64_t us = 0;
    if (absl::SimpleAtoi(env, &us) && us >= 0) return absl::Microseconds(us);
  }
  return local_ranks <= CoresAvailable() ? absl::Microseconds(50) : absl::ZeroDuration();
}

absl::Status WaitSignal(ShmSignal& signal, uint32_t target, const Deadline& deadline,
                        const ShmWaitOptions& options) {
  if (SignalReached(signal.Load(), target)) return absl::OkStatus();
  // Spin first: a peer on another core usually posts within microseconds.
  if (options.spin > absl::ZeroDuration()) {
    const absl::Time spin_end = absl::Now() + options.spin;
    int rounds = 0;
    while (true) {
      for (int i = 0; i < 64; ++i) {
        if (SignalReached(signal.Load(), target)) return absl::OkStatus();
        CpuRelax();
      }
      if ((++rounds & 7) == 0 && absl::Now() >= spin_end) break;
    }
  } else {
    // Oversubscribed: give the core away once before sleeping; the peer may run now.
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
