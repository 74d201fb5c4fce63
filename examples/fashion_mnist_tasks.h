// fashion_mnist --elastic --data=tasks: the training samples of an elastic worker come from record
// shards (paddle/data/shard_set.h) through the task master (paddle/data/task_master.h), and the
// positions in the tasks a worker holds are part of the elastic commit, so that every sample of an
// epoch is in exactly one committed model update whatever workers die, stall, leave or join
// (Note [Task positions] in fashion_mnist_tasks.cc). With a ledger directory every worker writes
// the sample ids of every committed step there, for tools/ledger-check; with sample_digest every
// rank prints a fingerprint of the ids it trained on in each epoch (Note [Sample digest]).
//
// The training loops (fashion_mnist_elastic.cc; fashion_mnist_task_group.cc for a static group)
// call, on every rank:
//   StartGeneration after adopting the generation's commit; TakeStep for each step's samples;
//   Exchange right before ElasticState::Commit and AfterCommit right after it; EndEpoch (rank 0
//   only) when a step found no sample anywhere.
// One training thread owns the object; the task master's prefetch Ask, which also finishes the
// tasks of the last commit, runs on a thread of its own beside it (Note [Master calls] and Note
// [Folded finish] in fashion_mnist_tasks.cc).
#ifndef EXAMPLES_FASHION_MNIST_TASKS_H_
#define EXAMPLES_FASHION_MNIST_TASKS_H_

#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/tensor.h"
#include "paddle/data/shard_reader.h"
#include "paddle/data/shard_set.h"
#include "paddle/data/task_feed.h"
#include "paddle/data/task_master.h"

namespace paddle::examples {

struct TaskDataOptions {
  std::string shards_dir;  // written by //tools:make_shards --fashion-mnist
  int64_t records_per_task = 500;
  uint64_t seed = 1;          // the task order of epoch e is Philox(seed, e)
  std::string ledger_dir;     // empty: no ledger
  int64_t commit_every = 10;  // most steps between two commits (sizes the exchange)
  int64_t global_batch = 128;
  bool sample_digest = false;  // EpochEnded prints this rank's Note [Sample digest] line
};

class TaskData {
 public:
  // Loads the MANIFEST (fields `label` uint8 [1] and `image` uint8 [28,28]) and joins (or
  // creates) the task master's queues in `store`, which outlives every worker.
  static absl::StatusOr<std::unique_ptr<TaskData>> Create(Store* store, TaskDataOptions options);
  ~TaskData();

  int64_t num_samples() const { return set_.NumRecords(); }
  // Every key this object keeps in ElasticState::extras(), at its empty value: every rank must
  // hold the same keys before the first commit.
  void InitExtras(std::map<std::string, int64_t>& extras) const;

  // After the generation's commit was adopted (ElasticState::Broadcast): forgets what this rank
  // read since that commit, adopts its share of the tasks the commit names (the i-th for
  // i % size == rank) and finishes those the commit consumed to the end.
  absl::Status StartGeneration(const std::map<std::string, int64_t>& extras, int64_t epoch,
                               int64_t generation, int rank, int size);

  // Reads up to `n` samples of `epoch` for step `step` (images normalized as LoadFashionMnist
  // does); fewer, possibly none, when the task master has no task left to hand out. Asks for the
  // next task ahead of need (Note [Task prefetch]).
  absl::StatusOr<int64_t> Take(int64_t epoch, int64_t step, int64_t n, Tensor* images,
                               Tensor* labels);
  // Records left in the tasks this rank holds: the next steps can take that many without asking
  // the task master (Note [Step count]).
  int64_t RecordsHeld() const;

  // One synchronous step's samples: Take of this rank's share of `global_batch`, and the step's
  // total over the ranks (Note [Step count]); `global` 0 when no rank had a sample (the epoch's
  // tail, Note [Task positions] step 5). Collective now and then.
  struct StepSamples {
    Tensor images, labels;
    int64_t got = 0;     // this rank's samples (0: images holds one dummy row)
    int64_t global = 0;  // every rank's
  };
  absl::StatusOr<StepSamples> TakeStep(Communicator& comm, int64_t epoch, int64_t step,
                                       int64_t global_batch);

  // Collective, right before ElasticState::Commit on every rank: gathers every rank's task
  // positions into `extras` (the same on every rank) and every rank's ledger lines since the
  // last commit.
  absl::Status Exchange(Communicator& comm, std::map<std::string, int64_t>& extras);
  // Right after the commit: appends the gathered ledger lines and lets the next Ask finish the
  // tasks the commit consumed to the end (at the epoch's tail: finishes them now). A static group
  // that keeps no commit (no checkpoint, no ledger) calls it without Exchange: then it only does
  // the finishing, and done() is not kept.
  absl::Status AfterCommit();
  // The ledger lines the last Exchange gathered (what AfterCommit appends), for a checkpoint.
  std::string CommittingLedger() const;
  // Appends ledger lines (from a checkpoint's CommittingLedger) to this worker's ledger file.
  absl::Status AppendLedger(const std::string& text);

  // Tasks of the epoch that a commit's AfterCommit finished, on any rank (the same list on every
  // rank): with the commit's task positions, what a checkpoint needs to restore the task master
  // (Note [Static task positions] in fashion_mnist_task_group.cc). EpochEnded clears it.
  const std::vector<int64_t>& done() const { return done_; }
  // On every rank once the epoch of the last TakeStep has ended: clears done(), and with
  // sample_digest prints the epoch's `sample_digest` line to stderr (Note [Sample digest]).
  void EpochEnded();
  // Resuming from a checkpoint: done() becomes `done`, and with `restore_master` (one rank) the
  // task master's queues become those of `epoch` with `done` done (TaskMaster::Restore).
  absl::Status RestoreDone(int64_t epoch, std::vector<int64_t> done, bool restore_master);

  // See TaskMaster::EndEpoch: only when no rank holds a task (a step found no sample anywhere).
  absl::StatusOr<bool> EndEpoch(int64_t epoch);

 private:
  struct Held {
    data::Task task;
    int64_t used = 0;                      // records of the task consumed, from its first
    std::unique_ptr<data::TaskFeed> feed;  // reading from `used` on, once started
    int64_t size() const { return task.range.end - task.range.begin; }
  };
  struct Line {
    int64_t epoch = 0, step = 0, rank = 0;
    std::vector<int64_t> ids;
  };
  TaskData(data::ShardSet set, std::unique_ptr<data::TaskMaster> master, TaskDataOptions options,
           data::TaskFeedLayout layout);
  // Starts the feed of held_[i] if it has none.
  absl::Status StartFeed(size_t i);
  // The records of `task` from record `used` on.
  data::RecordRange RangeOf(const data::Task& task, int64_t used) const;
  // Note [Task prefetch]: asks for a lease of tasks once the held ones run low, on another thread.
  absl::Status Prefetch(int64_t epoch, int64_t n);
  // Holds the tasks of the prefetch Ask in flight, if any, and starts their feeds; waits for the
  // answer if `wait`, else only takes one that is in.
  absl::Status TakeAsked(bool wait);
  // Holds the tasks of answer `a` (with `feeds[i]` the rows of its i-th task, where read ahead).
  void Hold(const data::TaskAnswer& a, std::vector<std::unique_ptr<data::TaskFeed>> feeds);
  // Note [Folded finish]: `carried` left unfinished_ in a transaction that said `accepted`.
  void Finished(const std::vector<data::Task>& carried, const std::vector<bool>& accepted);
  std::string Worker() const;

  const data::ShardSet set_;
  const std::unique_ptr<data::TaskMaster> master_;
  const TaskDataOptions options_;
  const data::TaskFeedLayout layout_;
  const std::shared_ptr<data::ShardIndexCache> indexes_ = std::make_shared<data::ShardIndexCache>();
  int rank_ = 0, size_ = 1;
  int64_t generation_ = 0;
  std::vector<Held> held_;
  int64_t ahead_epoch_ = -1;      // the master had nothing to prefetch in this epoch and generation
  std::vector<Line> lines_;       // this rank's steps since the last commit
  std::vector<Line> committing_;  // every rank's, from the last Exchange
  std::FILE* ledger_ = nullptr;
  int64_t full_steps_ = 0;          // Note [Step count]
  std::vector<int64_t> done_;       // see done()
  std::vector<int64_t> finishing_;  // every rank's used-up tasks of the last Exchange
  // Note [Folded finish]: this rank's used-up tasks that a commit named and the store has not
  // finished yet; every commit names them again until it has.
  std::vector<data::Task> unfinished_;
  // Note [Master calls]: the store round trips that run beside the training thread.
  struct Asked {
    absl::StatusOr<data::TaskAnswer> answer;
    std::vector<std::unique_ptr<data::TaskFeed>> feeds;  // the tasks' rows, read ahead (or null)
    std::vector<data::Task> finishing;                   // what it finishes of unfinished_
  };
  std::future<Asked> asking_;  // a prefetch Ask
  int64_t asking_epoch_ = -1;
  bool tail_ = false;  // the last TakeStep found no sample on any rank: AfterCommit finishes now
  int64_t step_epoch_ = -1;  // the epoch of the last TakeStep
  // Note [Sample digest]: this rank's committed samples of `epoch`, with sample_digest only.
  struct Digest {
    int64_t epoch = -1, count = 0;
    uint64_t sum = 0;
  } digest_;
  class MasterThread;
  std::unique_ptr<MasterThread> master_thread_;  // runs them; last, so it stops first
};

// The weight of a rank's mean loss in a step where it read `got` samples, in a group of `world`
// ranks whose global batch is `global_batch` (Note [Short steps]): 1 in a full step, 0 for a
// rank's dummy sample, less in a short step.
double ShortStepWeight(int64_t got, int world, int64_t global_batch);

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_TASKS_H_
