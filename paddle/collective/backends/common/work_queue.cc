// WorkQueue and QueuedWork; see work_queue.h and Note [Communicator failure] in communicator.h.
#include "paddle/collective/backends/common/work_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

std::string Seconds(std::chrono::steady_clock::duration d) {
  return absl::StrFormat("%.3gs", std::chrono::duration<double>(d).count());
}

}  // namespace

// ---- QueuedWork ----

QueuedWork::QueuedWork(std::string description, uint64_t seq, std::string owner)
    : description_(std::move(description)), seq_(seq), owner_(std::move(owner)) {}

QueuedWork::QueuedWork(std::string description, uint64_t seq, std::string owner,
                       std::shared_ptr<WaiterHook> hook)
    : description_(std::move(description)),
      seq_(seq),
      owner_(std::move(owner)),
      hook_(std::move(hook)) {}

absl::Status QueuedWork::Wait(absl::Duration timeout) {
  // Note [Waiter runs the operation]: only a Wait without a timeout, since the operation then
  // runs to its own collective deadline, which a shorter Wait timeout must not have to await.
  if (hook_ != nullptr) {
    bool queued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued = state_ == State::kQueued;
    }
    if (queued) {
      std::unique_lock<std::mutex> hook_lock(hook_->mu, std::try_to_lock);
      if (hook_lock.owns_lock() && hook_->queue != nullptr) {
        // Note [Lazy queue thread]: whoever does not run it wakes a lazy thread, so it is not
        // left to a look that may be milliseconds away.
        if (timeout != absl::InfiniteDuration() || !hook_->queue->RunIfNext(this)) {
          hook_->queue->WakeIfLazy();
        }
      }
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [this] { return state_ == State::kDone; };
  if (timeout == absl::InfiniteDuration()) {
    done_cv_.wait(lock, done);
    return status_;
  }
  // Durations past a century are as good as infinite, and would overflow the clock.
  const absl::Duration bounded =
      std::min(std::max(timeout, absl::ZeroDuration()), absl::Hours(24 * 365 * 100));
  const Clock::time_point give_up = Clock::now() + absl::ToChronoNanoseconds(bounded);
  if (done_cv_.wait_until(lock, give_up, done)) return status_;
  const Clock::time_point now = Clock::now();
  std::string where;
  if (state_ == State::kQueued) {
    where = absl::StrCat(
        "it has not started: operations called before it on this communicator "
        "are still running (queued ",
        Seconds(now - created_), " ago)");
  } else {
    where = absl::StrCat("it has been running for ", Seconds(now - started_),
                         " and goes on until it completes or its own collective timeout ends it");
  }
  return absl::DeadlineExceededError(
      absl::StrCat("Work::Wait gave up on ", description_, " of ", owner_, " after ",
                   absl::FormatDuration(timeout), ": ", where,
                   "; wait again, or pass a longer timeout to Wait()"));
}

bool QueuedWork::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kDone;
}

absl::Status QueuedWork::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kDone) {
    return absl::UnavailableError(absl::StrCat(description_, " is still running"));
  }
  return status_;
}

void QueuedWork::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kQueued) return;
  state_ = State::kRunning;
  started_ = Clock::now();
}

void QueuedWork::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
    state_ = State::kDone;
    status_ = std::move(status);
  }
  done_cv_.notify_all();
}

// ---- WorkQueue ----

WorkQueue::WorkQueue(int rank, int world_size, std::function<void(const absl::Status&)> on_poison,
                     std::function<void()> thread_init)
    : rank_(rank),
      world_size_(world_size),
      owner_(absl::StrCat("rank ", rank, "/", world_size)),
      on_poison_(std::move(on_poison)),
      thread_init_(std::move(thread_init)),
      thread_([this] { Run(); }) {
  std::lock_guard<std::mutex> lock(hook_->mu);
  hook_->queue = this;
}

WorkQueue::~WorkQueue() {
  {
    // Waits for an operation a waiter is running; later waiters find no queue.
    std::lock_guard<std::mutex> lock(hook_->mu);
    hook_->queue = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkQueue::Enqueue(std::shared_ptr<QueuedWork> work, Task task) {
  absl::Status cause;
  std::shared_ptr<QueuedWork> refused;  // set when the queue is poisoned
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = !lazy_;  // Note [Lazy queue thread]
    if (cause_.ok()) {
      queue_.push_back(Item{std::move(work), std::move(task)});
    } else {
      cause = cause_;
      refused = std::move(work);
    }
  }
  if (refused == nullptr) {
    if (wake) cv_.notify_one();
  } else {
    refused->Complete(NotRun(*refused, cause));
  }
}

void WorkQueue::Poison(const absl::Status& cause) {
  const absl::Status first =
      cause.ok() ? absl::AbortedError(absl::StrCat("the communicator of ", owner_,
                                                   " was aborted (with an OK status)"))
                 : cause;
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cause_.ok()) return;
    cause_ = first;
    dropped.swap(queue_);
  }
  PADDLE_LOG(WARN, COLL) << "communicator of " << owner_ << " poisoned"
                         << (dropped.empty() ? ""
                                             : absl::StrCat(", ", dropped.size(),
                                                            " queued operation(s) failed"))
                         << ": " << first;
  if (on_poison_) on_poison_(first);
  for (Item& item : dropped) item.work->Complete(NotRun(*item.work, first));
}

absl::Status WorkQueue::poison_cause() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cause_;
}

absl::Status WorkQueue::NotRun(const QueuedWork& work, const absl::Status& cause) const {
  return absl::Status(
      cause.code(),
      absl::StrCat(work.Describe(), " was not run: the communicator of ", owner_,
                   " was poisoned by an earlier failure and stays poisoned; build a new one "
                   "(from a new rendezvous) to continue. The first failure: ",
                   cause.message()));
}

void WorkQueue::Run() {
  ScopedLogRank log_rank(rank_, world_size_);
  if (thread_init_) thread_init_();
  auto ready = [this] { return !busy_ && (stopping_ || !queue_.empty()); };
  for (;;) {
    Item item;
    absl::Status cause;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Note [Lazy queue thread]: while lazy, look now and then instead of being woken.
      std::chrono::milliseconds tick = kLazyTick;
      std::chrono::milliseconds idle{0};
      while (!ready()) {
        if (!lazy_) {
          cv_.wait(lock, [&] { return ready() || lazy_; });
          tick = kLazyTick;
          idle = std::chrono::milliseconds{0};
          continue;
        }
        cv_.wait_for(lock, tick);
        if (!queue_.empty()) continue;
        if (!busy_ && (idle += tick) >= kLazyIdle) lazy_ = false;
        tick = std::min(tick * 2, kLazyMaxTick);
      }
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(queue_.front());
      queue_.pop_front();
      cause = cause_;
      busy_ = true;
      lazy_ = false;  // nobody waited for this one: back to waking at once
    }
    RunItem(item, cause);
  }
}

bool WorkQueue::RunIfNext(const QueuedWork* work) {
  Item item;
  absl::Status cause;
  bool became_lazy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ || queue_.empty() || queue_.front().work.get() != work) return false;
    item = std::move(queue_.front());
    queue_.pop_front();
    cause = cause_;
    busy_ = true;
    became_lazy = !lazy_;
    lazy_ = true;  // the caller waits for its operations: Note [Lazy queue thread]
  }
  // Once per switch: the thread, asleep until woken, starts looking every tick instead.
  if (became_lazy) cv_.notify_one();
  ScopedLogRank log_rank(rank_, world_size_);
  RunItem(item, cause);
  return true;
}

void WorkQueue::WakeIfLazy() {
  bool lazy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // While an operation runs, RunItem wakes the thread when it ends (the queue is not empty).
    lazy = lazy_ && !busy_;
  }
  if (lazy) cv_.notify_one();
}

void WorkQueue::RunItem(Item& item, const absl::Status& cause) {
  if (!cause.ok()) {
    item.work->Complete(NotRun(*item.work, cause));
  } else {
    item.work->MarkStarted();
    TaskResult result = item.task();
    absl::Status status = Annotate(result.status, item.work->Describe());
    // Poison before completing, so that a caller who sees this Work fail and calls again meets
    // the poisoned queue rather than a peer that has gone.
    if (!status.ok() && result.poison) Poison(status);
    item.work->Complete(std::move(status));
  }
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    // The queue thread waits for this one to finish only if there is more to run or it is
    // stopping; otherwise Enqueue wakes it. (A wake-up for nothing is two context switches.)
    wake = !queue_.empty() || stopping_;
  }
  if (wake) cv_.notify_one();
}

}  // namespace paddle
