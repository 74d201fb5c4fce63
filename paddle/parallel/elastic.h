// ElasticGroup: a data-parallel group whose members change while the job runs.
//
// Workers meet in numbered generations through the job's store (which must outlive any single
// worker: paddlerun hosts it in the launcher for elastic jobs). Each generation has its own keys
// ("<prefix>/g<N>/..."), its own ranks and its own Communicator. When a peer dies, the survivors'
// communicator fails (Note [Communicator failure]); each survivor calls Leave() with the cause,
// which aborts and destroys it (its threads, sockets and buffers go with it), and Join() the next
// generation, then rolls back to its last commit (Note [Elastic commit] in elastic_state.cc). A
// new worker (restarted by the launcher) joins the newest generation that is still open; the
// running members see it at their next AgreeOnChange(), commit, and move to the next generation
// together with it, without a rollback; a worker that wants to leave (SIGTERM) does the same and
// exits. See Note [Elastic rendezvous] in elastic.cc for how a generation forms.
//
// Thread-safety: one training thread owns the object.
#ifndef PADDLE_PARALLEL_ELASTIC_H_
#define PADDLE_PARALLEL_ELASTIC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/deadline.h"

namespace paddle {

struct ElasticOptions {
  std::shared_ptr<Store> store;  // the job's store; required
  std::string prefix = "elastic";
  int min_size = 1;
  int max_size = 1 << 20;
  // After a failure the new generation closes once this long has passed without a new arrival
  // (or at once when the expected number of members has arrived).
  absl::Duration settle = absl::Milliseconds(500);
  // The first generation (no member has any state yet) waits this long for latecomers.
  absl::Duration start_settle = absl::Seconds(5);
  // Longest a Join() may take before it fails with kDeadlineExceeded.
  absl::Duration join_timeout = absl::Seconds(300);
  // Backend and timeouts of every generation's communicator (store, rank and size are set here).
  CommunicatorOptions comm;
};

struct Membership {
  int64_t generation = 0;
  int rank = 0;
  int size = 0;
  int64_t root_commit_step = -1;  // rank 0's commit step, which everyone adopts; -1: none
};

// What the members agreed at a step: workers waiting to join, and ranks that leave.
struct MembershipChange {
  int joiners = 0;
  std::vector<int> leavers;
  bool any() const { return joiners > 0 || !leavers.empty(); }
};

class ElasticGroup {
 public:
  // Checks the options; joins nothing yet.
  static absl::StatusOr<std::unique_ptr<ElasticGroup>> Create(ElasticOptions options);
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // Joins the next generation (the first call: the newest open one). `commit_step` is the step
  // of this worker's last commit, -1 without one. `expected`: members the caller knows will come
  // (0 if unknown); the generation closes when they have arrived, else per ElasticOptions.
  // kCancelled once the job has finished (MarkDone): the worker should exit successfully.
  absl::StatusOr<Membership> Join(int64_t commit_step, int expected);

  // Drops this generation's communicator, after aborting it with `cause` if that is an error.
  void Leave(const absl::Status& cause = absl::OkStatus());

  // Collective over the current communicator: whether this rank wants to leave, and whether any
  // worker waits to join the next generation (read from the store by rank 0). With `sum`, the
  // same allreduce also sums *sum over the ranks (a step's loss, say) into *sum: no extra
  // collective per step.
  absl::StatusOr<MembershipChange> AgreeOnChange(bool leaving, double* sum = nullptr);

  // Whether any generation has formed in the store: the job is running (or has run). A worker
  // that finds it so gets its state from the members, never from a file.
  absl::StatusOr<bool> JobStarted();

  // Training has finished: workers still waiting to join stop with kCancelled.
  absl::Status MarkDone();

  Communicator* comm() const { return comm_.get(); }
  // The same communicator, shared: a holder (the Python binding's process group) keeps it alive
  // past Leave() (aborted if Leave had a cause), so a stale reference fails with the transport's
  // error instead of pointing at freed memory. Null between generations.
  std::shared_ptr<Communicator> shared_comm() const { return comm_; }
  const std::shared_ptr<Store>& store() const { return options_.store; }
  int rank() const { return membership_.rank; }
  int size() const { return membership_.size; }
  int64_t generation() const { return membership_.generation; }
  // Generations this worker has joined after its first.
  int64_t changes() const { return changes_; }

 private:
  explicit ElasticGroup(ElasticOptions options) : options_(std::move(options)) {}
  std::string Key(int64_t generation, absl::string_view name) const;
  absl::StatusOr<bool> Done();
  // One attempt at generation `g`: the membership, or kOutOfRange when it closed without us.
  absl::StatusOr<Membership> TryJoin(int64_t g, int64_t commit_step, int expected,
                                     const Deadline& deadline);
  // Deletes the keys this member wrote for generations g-2 and older.
  void DeleteOldKeys(int64_t g);

  ElasticOptions options_;
  std::shared_ptr<Communicator> comm_;
  Membership membership_;
  bool joined_once_ = false;
  int64_t changes_ = 0;
  std::map<int64_t, std::vector<std::string>> written_;  // generation -> keys this member wrote
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_ELASTIC_H_
