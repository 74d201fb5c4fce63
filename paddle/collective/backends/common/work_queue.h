// WorkQueue: the one thread on which a communicator (native, Gloo) runs its operations, in call
// order, and QueuedWork, the Work handle of an operation on it.
//
// Every communicator call returns a QueuedWork at once and appends a task to the queue; the
// queue's thread runs the tasks one at a time. Because every rank issues its collectives in the
// same order and runs them in that order, the n ranks' k-th operations meet each other.
//
// Note [Communicator failure] (see communicator.h) lives here: the first task that fails, or a
// Poison() from any thread (Communicator::Abort), poisons the queue. Poisoning runs the owner's
// `on_poison` callback once (the communicator aborts its transport there, which wakes the task
// that is running and, through the closed links, the peers blocked on this rank), fails every
// queued task at once, and makes every later Enqueue fail at once, all with a status that names
// the operation and carries the first cause. A poisoned queue stays poisoned.
//
// Note [Waiter runs the operation]. A caller that waits on an operation which is next in line and
// nothing else is running runs it itself, on its own thread, instead of waking the queue thread
// and then being woken by it: for a small blocking allreduce those two thread hand-offs were
// about half the time (docs/performance-notes.md, "Work queue"). Order is kept: only the
// front operation is taken, and only while no other one runs (busy_). The queue reaches the
// waiter through a shared WaiterHook that the queue's destructor detaches under the hook's lock,
// so a Work that outlives its communicator never touches it, and a destructor waits for an
// operation a waiter is running. Waiters only try_lock the hook, so a Wait(timeout) never blocks
// behind another waiter's operation.
//
// Note [Lazy queue thread]. Waking the queue thread for an operation its caller then runs itself
// is wasted: a futex wake and two context switches, over a third of a small allreduce. So once a
// waiter has run an operation, the queue turns lazy:
// Enqueue no longer wakes the thread, which instead looks at the queue now and then. An
// operation nobody waits for therefore still starts, a little late, and the thread that runs it
// turns the queue eager again (Enqueue wakes it at once), as it does after kLazyIdle with nothing
// queued. The looks back off: kLazyTick (1 ms) after turning lazy, doubling after each look that
// finds nothing queued, up to kLazyMaxTick (8 ms). Each look is a timer wake-up that takes the
// CPU from whatever runs there, with few cores from the other rank's training step (a fixed 1 ms
// look cost a small MLP 5-10% of its throughput: docs/performance-notes.md, "Work queue"). A
// waiter that has to block on a queued operation it
// does not run itself (a Wait with a timeout, or an operation behind another) wakes a lazy
// thread at once, so only operations nobody waits for see the back-off.
#ifndef PADDLE_COLLECTIVE_BACKENDS_COMMON_WORK_QUEUE_H_
#define PADDLE_COLLECTIVE_BACKENDS_COMMON_WORK_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/work.h"

namespace paddle {

// std::mutex and std::condition_variable rather than absl::Mutex throughout: Debian's Abseil is
// not built for ThreadSanitizer, which sees pthread locking only.
class WorkQueue;

// See Note [Waiter runs the operation].
struct WaiterHook {
  std::mutex mu;
  WorkQueue* queue = nullptr;  // guarded by mu; null once the queue is gone
};

class QueuedWork final : public Work {
 public:
  // `description` is "allreduce #17 (float32 x 1048576, sum)"; `owner` is "rank 1/4", for the
  // Wait timeout message.
  QueuedWork(std::string description, uint64_t seq, std::string owner);
  // A Work whose Wait may run the operation itself (Note [Waiter runs the operation]).
  QueuedWork(std::string description, uint64_t seq, std::string owner,
             std::shared_ptr<WaiterHook> hook);

  // Wait() detail: a Wait that times out returns kDeadlineExceeded saying whether the operation
  // was still queued behind earlier ones or had been running, and for how long.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) override;
  bool IsCompleted() const override;
  absl::Status status() const override;
  std::string Describe() const override { return description_; }
  uint64_t seq() const override { return seq_; }

  // The queue thread starts running the operation.
  void MarkStarted();
  // Sets the final status and wakes every waiter; later calls are ignored.
  void Complete(absl::Status status);

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { kQueued, kRunning, kDone };

  const std::string description_;
  const uint64_t seq_;
  const std::string owner_;
  const Clock::time_point created_ = Clock::now();
  const std::shared_ptr<WaiterHook> hook_;  // may be null

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  State state_ = State::kQueued;  // guarded by mu_
  Clock::time_point started_;     // guarded by mu_
  absl::Status status_;           // guarded by mu_
};

class WorkQueue {
 public:
  // What a task returns: its status and whether a failure poisons the queue. Only a failure that
  // provably left the transport intact and every rank in step may skip poisoning (the debug
  // checks' disagreement, which every rank finds alike before anything is sent).
  struct TaskResult {
    TaskResult(absl::Status s) : status(std::move(s)) {}  // NOLINT: implicit, for `return s;`
    TaskResult(absl::Status s, bool poison) : status(std::move(s)), poison(poison) {}
    absl::Status status;
    bool poison = true;
  };
  // Runs on the queue thread; its status, prefixed with the Work's description, becomes the
  // Work's.
  using Task = std::function<TaskResult()>;

  // The queue of `rank` in a group of `world_size` (named "rank 1/4" in messages, and in the log
  // prefix of its thread). `on_poison` runs once, on the thread that poisons the queue, with no
  // lock held. `thread_init`, if set, runs first on the queue's thread (Gloo blocks SIGPIPE).
  WorkQueue(int rank, int world_size, std::function<void(const absl::Status&)> on_poison,
            std::function<void()> thread_init = nullptr);
  // Lets the queued tasks run (each is bounded by its own deadline, and they fail at once if the
  // queue is poisoned), then joins the thread.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task` for `work`; on a poisoned queue, fails `work` at once instead.
  void Enqueue(std::shared_ptr<QueuedWork> work, Task task);

  // For the QueuedWorks of this queue (Note [Waiter runs the operation]).
  const std::shared_ptr<WaiterHook>& waiter_hook() const { return hook_; }
  // Runs `work` on the calling thread if it is next and nothing else runs; false otherwise.
  // Called by QueuedWork::Wait with the hook's lock held.
  bool RunIfNext(const QueuedWork* work);
  // Wakes the queue thread if the queue is lazy: a waiter is about to block on a queued operation
  // it will not run (Note [Lazy queue thread]). Called by QueuedWork::Wait with the hook's lock
  // held.
  void WakeIfLazy();

  // Poisons the queue with `cause` (an OK cause becomes kAborted); the first cause wins. Any
  // thread, any number of times.
  void Poison(const absl::Status& cause);

  // OK while healthy; the first cause once poisoned.
  absl::Status poison_cause() const;

  // The status of an operation that was not run because the queue was poisoned by `cause`: the
  // cause's code, naming the operation and carrying the cause's message.
  absl::Status NotRun(const QueuedWork& work, const absl::Status& cause) const;

 private:
  struct Item {
    std::shared_ptr<QueuedWork> work;
    Task task;
  };

  void Run();
  // Runs a task taken off the queue (by the queue thread or a waiter), then clears busy_.
  void RunItem(Item& item, const absl::Status& cause);

  const int rank_;
  const int world_size_;
  const std::string owner_;
  const std::function<void(const absl::Status&)> on_poison_;
  const std::function<void()> thread_init_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mu_
  absl::Status cause_;      // guarded by mu_; not OK once poisoned
  bool stopping_ = false;   // guarded by mu_
  bool busy_ = false;       // guarded by mu_; an operation runs (on the thread or a waiter)
  bool lazy_ = false;       // guarded by mu_; Note [Lazy queue thread]
  static constexpr std::chrono::milliseconds kLazyTick{1};
  static constexpr std::chrono::milliseconds kLazyMaxTick{8};
  static constexpr std::chrono::milliseconds kLazyIdle{100};
  const std::shared_ptr<WaiterHook> hook_ = std::make_shared<WaiterHook>();

  std::thread thread_;  // last: starts after everything above is initialised
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_COMMON_WORK_QUEUE_H_
