// A counter in shared memory that one process advances and others wait on.
//
// The one synchronisation primitive of the shared-memory code: a writer publishes progress by
// storing a larger value (`Post`); readers wait until the value reaches a target. A waiter spins
// for a while (cheap when every rank has a core), then sleeps in the kernel on the counter's
// address (futex, shared between processes), and wakes at least every 50 ms to check that the
// writer still runs and that its deadline has not passed, so a dead peer or a lost wake-up can
// never hang it (Note [Signal wake-ups] in shm_signal.cc).
//
// Values are 32-bit and compared modulo 2^32 (a target counts as reached when value - target,
// as a signed number, is >= 0), so a counter may run forever as long as nobody waits for a
// target more than 2^31 steps ahead.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SIGNAL_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SIGNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/core/deadline.h"

namespace paddle {

// Lives in shared memory: trivially constructible from zero bytes; one cache line.
struct alignas(64) ShmSignal {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> sleepers;  // waiters inside FUTEX_WAIT (or about to enter it)
  char padding[56];

  uint32_t Load() const { return value.load(std::memory_order_acquire); }
  // Publishes `v` (release: the writes before it are visible to whoever sees `v`) and wakes the
  // sleepers.
  void Post(uint32_t v);
};
static_assert(sizeof(ShmSignal) == 64, "one cache line");

inline bool SignalReached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// How long waits spin before they sleep. The default is 50 us when this process has a core per
// local rank and 0 otherwise: with more ranks than cores a spinning waiter only takes the core
// from the rank it waits for. PADDLE_SHM_SPIN_US overrides both; a malformed value is
// kInvalidArgument naming the variable and the value.
absl::StatusOr<absl::Duration> DefaultShmSpin(int local_ranks);

// Whether spinning has been paying off for one group of waits (one workspace or transport):
// Note [Adaptive spin] in shm_signal.cc. Thread-safe; lives in the process, not in shared memory.
class ShmSpinHistory {
 public:
  // Whether the next wait should spin: yes while recent spins mostly ended with the post, and for
  // one probe in every kProbeEvery waits otherwise.
  bool ShouldSpin();
  // What the spin of a wait that did spin achieved.
  void Record(bool posted_while_spinning);

  static constexpr int kProbeEvery = 32;

 private:
  std::atomic<int> score_{kMaxScore};  // +1 per spin that saw the post, -2 per one that did not
  std::atomic<uint32_t> skipped_{0};
  static constexpr int kMaxScore = 16;
  static constexpr int kSpinFrom = 8;
};

// Moves the calling thread off CPU `cpu` (Note [Ranks glued to one CPU] in node_workspace.cc):
// narrows its affinity to its allowed CPUs other than `cpu`, which migrates it at once, then
// restores the affinity it had. Returns the CPU it runs on afterwards, or `cpu` when it cannot
// move (`cpu` is not allowed, or is the only allowed CPU; a failed call changes nothing).
int MoveOffCpu(int cpu);

struct ShmWaitOptions {
  absl::Duration spin = absl::Microseconds(50);
  // When set, waits spin only while spinning pays (may be null: always spin `spin`).
  ShmSpinHistory* history = nullptr;
  // Called about every 50 ms while sleeping; a non-OK status ends the wait with it (the caller
  // checks its peers' liveness and its transport's abort flag here).
  std::function<absl::Status()> check;
};

// Waits until SignalReached(signal.Load(), target). kDeadlineExceeded when `deadline` passes
// first (the message says only how long: callers add who and what); `check`'s error if it fails.
absl::Status WaitSignal(ShmSignal& signal, uint32_t target, const Deadline& deadline,
                        const ShmWaitOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_SIGNAL_H_
