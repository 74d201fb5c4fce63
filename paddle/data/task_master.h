// TaskMaster: hands out the tasks of a data set (ranges of record shards) to workers through the
// job's store, so that workers can die, straggle and rejoin without a sample being lost or read
// twice in an epoch. This is seed 004's design (Paddle's todo / pending / done queues), with the
// queues living in the store instead of in one master process.
//
// Every TaskMaster object is a client: there is no master process. The state of all queues is
// one value in the store, and every transition (a task handed out, finished, failed, timed out,
// the epoch advanced) is a compare-and-set of that value, so whichever workers die the state is
// whatever the last successful transition wrote (see Note [Task master] in task_master.cc for the
// protocol and exactly what it guarantees). Works on any Store: HashStore in tests, the TCPStore
// of a job, or etcd for a state that outlives every worker.
//
//   TaskMaster::Create(store, MakeTasks(shards, 1000), options)
//   loop: Ask(epoch, worker) -> kTask: read the task's records, train, then Finish(task)
//                                       (or pass it to the next Ask, AskOptions::finish)
//                             -> kWait: all tasks handed out, some still pending: retry later
//                             -> kEpochDone: every task of `epoch` is done; go to epoch + 1
//
// Thread-safe (each call is one store transaction); time comes from `options.clock`, so tests
// drive timeouts with a fake clock. Timeouts compare wall-clock times written by different
// workers: their clocks must agree to well within the task timeout.
#ifndef PADDLE_DATA_TASK_MASTER_H_
#define PADDLE_DATA_TASK_MASTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/store/store.h"

namespace paddle {
namespace data {

// A task: records [begin, end) of shard number `shard` (an index into the job's shard list).
struct TaskRange {
  int32_t shard = 0;
  int64_t begin = 0;
  int64_t end = 0;
  friend bool operator==(const TaskRange& a, const TaskRange& b) {
    return a.shard == b.shard && a.begin == b.begin && a.end == b.end;
  }
};

// Cuts shards of `record_counts[i]` records into tasks of at most `records_per_task` records,
// shard by shard in order (kInvalidArgument unless records_per_task > 0 and counts >= 0).
absl::StatusOr<std::vector<TaskRange>> MakeTasks(absl::Span<const int64_t> record_counts,
                                                 int64_t records_per_task);

struct TaskMasterOptions {
  std::string key = "task_master/state";  // the store key holding all queues
  uint64_t seed = 0;                      // epoch e hands out tasks in Philox(seed, e) order
  // A task handed out this many times without being finished (timeouts and Fail calls) is set
  // aside for the rest of the job and listed by GetState().
  int max_failures = 3;
  // Task timeout: `timeout_factor` x the longest of the last finished tasks' durations, kept in
  // [min_timeout, max_timeout]; `initial_timeout` until a task has been finished.
  absl::Duration initial_timeout = absl::Minutes(5);
  absl::Duration min_timeout = absl::Seconds(10);
  absl::Duration max_timeout = absl::Minutes(30);
  double timeout_factor = 3.0;
  // Bound on each call, store round trips and compare-and-set retries included.
  absl::Duration call_timeout = absl::Seconds(60);
  std::function<absl::Time()> clock = [] { return absl::Now(); };
};

// A task handed to one worker. (epoch, generation) identify this hand-out: a Finish carrying an
// older generation than the task's current one is ignored.
struct Task {
  int64_t id = -1;
  int64_t epoch = 0;
  int64_t generation = 0;
  TaskRange range;
  absl::Time deadline;  // when the master stops waiting and hands the task out again
};

// What one Ask may do besides handing out a task, in the same transaction (Note [Leases] in
// task_master.cc): fewer store round trips per task.
struct AskOptions {
  // Hands out up to this many tasks (a lease), but no more than todo / `ways` (at least one): near
  // the epoch's end one worker then does not sit on tasks that `ways` workers could read side by
  // side. Each task of a lease is pending on its own, as if asked for one by one.
  int max_tasks = 1;
  int ways = 1;
  // Finishes these first, exactly as Finish(finish) would; TaskAnswer::finished says which.
  absl::Span<const Task> finish;
};

struct TaskAnswer {
  enum Kind { kTask, kWait, kEpochDone };
  Kind kind = kWait;
  Task task;                                          // for kTask: the first task to read
  std::vector<Task> more;                             // for kTask: the lease's others, in order
  absl::Duration retry_after = absl::ZeroDuration();  // for kWait: until the first pending deadline
  std::vector<bool> finished;                         // per AskOptions::finish, as Finish returns
};

// A snapshot of the queues, for reports and tests.
struct TaskMasterState {
  int64_t epoch = 0;
  int64_t version = 0;  // transitions so far
  std::vector<int64_t> todo;
  std::vector<int64_t> pending;
  std::vector<int64_t> done;
  std::vector<int64_t> set_aside;
  std::vector<std::string> set_aside_reasons;  // the last failure of each set-aside task
  absl::Duration timeout;                      // the timeout given to the next hand-out
};

class TaskMaster {
 public:
  // Publishes the initial state (epoch 0, every task in todo, shuffled) unless one exists; a
  // state left by other workers or an earlier run of the job is joined as it is. kInvalidArgument
  // for bad options or an empty task list; kFailedPrecondition if the existing state was made for
  // a different task list (its fingerprint differs).
  static absl::StatusOr<std::unique_ptr<TaskMaster>> Create(Store* store,
                                                            std::vector<TaskRange> tasks,
                                                            TaskMasterOptions options = {});

  // The next task of `epoch` for `worker` (a name for reports, e.g. "rank3/pid1234"), or a lease
  // of several (AskOptions). First the tasks of `options.finish` are finished, then every pending
  // task whose deadline has passed counts a failure and goes back to todo (or aside). kEpochDone
  // once the job is past `epoch`; kFailedPrecondition if `epoch` is ahead of it (nothing is
  // finished then); kInvalidArgument unless max_tasks and ways are >= 1.
  absl::StatusOr<TaskAnswer> Ask(int64_t epoch, absl::string_view worker,
                                 const AskOptions& options = {});

  // Moves each task to done if it is still pending under this hand-out (same epoch and
  // generation) and returns, per task, whether it did; a stale task (timed out and handed out
  // again, or of a finished epoch) is ignored. All of `tasks` change in one transition.
  absl::StatusOr<std::vector<bool>> Finish(absl::Span<const Task> tasks);

  // Gives a task back after a failure (it counts toward max_failures). Ignored (false) if stale.
  absl::StatusOr<bool> Fail(const Task& task, absl::string_view reason);

  // For a trainer whose committed state names the tasks it holds (Note [Task positions] in
  // examples/fashion_mnist_tasks.cc): takes task `id` of `epoch` over for `worker` under a new
  // generation, wherever it is in todo or pending (a hand-out of a dead or stopped worker, or one
  // that timed out), so the earlier holder's Finish is ignored from now on. nullopt if the task
  // is already done (or the job is past `epoch`); kFailedPrecondition if it was set aside or
  // `epoch` is ahead of the job. No failure is counted.
  absl::StatusOr<std::optional<Task>> Adopt(int64_t epoch, int64_t id, absl::string_view worker);

  // Ends `epoch` for a synchronous trainer whose workers all hold no task: true once the job is
  // past `epoch` (advancing it when todo and pending are empty, as Ask does). Otherwise every
  // pending task is a hand-out nobody in the job will finish (taken by a worker that has since
  // been rolled back or removed): they go back to the head of todo, without a failure counted,
  // and the answer is false (ask again).
  absl::StatusOr<bool> EndEpoch(int64_t epoch);

  // For a trainer resuming from a checkpoint that recorded which tasks of `epoch` were done
  // (Note [Static task positions] in examples/fashion_mnist_task_group.cc): the queues become
  // those of `epoch` with `done` done, nothing pending and every other task in todo in the epoch's
  // order, whatever the store held. Set-aside tasks and failure counts stay. kInvalidArgument for
  // a negative epoch or an id out of range or repeated.
  absl::Status Restore(int64_t epoch, absl::Span<const int64_t> done);

  absl::StatusOr<TaskMasterState> GetState();

  const std::vector<TaskRange>& tasks() const { return tasks_; }

 private:
  struct State;
  TaskMaster(Store* store, std::vector<TaskRange> tasks, TaskMasterOptions options,
             uint64_t fingerprint, uint64_t instance_id)
      : store_(store),
        tasks_(std::move(tasks)),
        options_(std::move(options)),
        fingerprint_(fingerprint),
        instance_id_(instance_id) {}

  // Reads the state, applies `change` and writes it back with compare-and-set, retrying from the
  // newer state until it wins or call_timeout passes. `change` returns false to write nothing.
  absl::Status Transact(absl::string_view op, const std::function<bool(State&)>& change);
  // Times out expired pending tasks (part of every transition).
  void Expire(State& state, absl::Time now) const;
  // Finish's change: true if it moved a task to done; `accepted` says which.
  bool FinishIn(State& state, absl::Span<const Task> tasks, absl::Time now,
                std::vector<bool>& accepted) const;
  void FailPending(State& state, int64_t id, const std::string& reason) const;
  absl::Duration Timeout(const State& state) const;

  Store* const store_;
  const std::vector<TaskRange> tasks_;
  const TaskMasterOptions options_;
  const uint64_t fingerprint_;
  const uint64_t instance_id_;  // with transactions_, the nonce of Note [Task master]
  std::atomic<uint64_t> transactions_{0};
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_TASK_MASTER_H_
