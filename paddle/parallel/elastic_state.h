// ElasticState: the whole training state of one data-parallel replica, with an in-memory commit
// and rollback, for elastic training (paddle/parallel/elastic.h).
//
// It holds the model's parameters and buffers, the optimizer's state (paddle/optim's
// SaveState/LoadState keys), the progress counters (epoch, step, the epoch's global data
// position, the running loss) and a few named integers the program adds (a random generator's
// offset, say). The learning-rate schedule is a pure function of the step (paddle/optim's
// LrSchedule::LrAt), so restoring the step restores it.
//
// Commit() takes a host copy of all of it (reusing the buffers of the previous commit, so a commit
// is a memcpy of the model and optimizer state); Rollback() writes the last commit back into the
// live model and optimizer. Broadcast() makes every rank's commit equal to `root`'s through a
// communicator: how a worker that joins a running job gets its state, with no file involved.
// None of this is thread-safe: one training thread owns the object. See Note [Elastic commit] in
// elastic_state.cc for why a commit is a point every rank agrees on.
#ifndef PADDLE_PARALLEL_ELASTIC_STATE_H_
#define PADDLE_PARALLEL_ELASTIC_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/checkpoint/checkpoint_file.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/module.h"
#include "paddle/optim/optimizer.h"

namespace paddle {

// Where training is; `samples` is global: samples of epoch `epoch` consumed by all ranks together,
// so any world size can continue from it (Note [Global data position] in elastic_state.cc).
struct TrainProgress {
  int64_t epoch = 0;
  int64_t step = 0;     // optimizer steps so far, all epochs
  int64_t samples = 0;  // of this epoch, all ranks together
  double loss_sum = 0;  // this epoch so far (sum over steps of the global mean loss)
  int64_t loss_count = 0;
  friend bool operator==(const TrainProgress& a, const TrainProgress& b) {
    return a.epoch == b.epoch && a.step == b.step && a.samples == b.samples &&
           a.loss_sum == b.loss_sum && a.loss_count == b.loss_count;
  }
};

class ElasticState {
 public:
  // `model` and `optimizer` outlive this object.
  ElasticState(nn::Module* model, optim::Optimizer* optimizer);
  ElasticState(const ElasticState&) = delete;
  ElasticState& operator=(const ElasticState&) = delete;

  // The live progress; the training loop advances it.
  TrainProgress& progress() { return progress_; }
  // Named integers of the program, committed and rolled back with the rest.
  std::map<std::string, int64_t>& extras() { return extras_; }

  // Copies the live state into the commit. Local: call it at the same step on every rank.
  absl::Status Commit();
  // Writes the last commit back into the model, the optimizer, progress() and extras().
  // kFailedPrecondition if nothing was ever committed.
  absl::Status Rollback();
  bool has_commit() const { return committed_; }
  // The committed progress (the live one may be ahead of it).
  const TrainProgress& committed() const { return committed_progress_; }

  // Collective over `comm`: every rank's commit becomes `root`'s (a rank without a commit commits
  // first, so it has buffers of the right shapes), then every rank rolls back to it. The ranks
  // must have built the same model and optimizer; a different number of entries or bytes is
  // kInvalidArgument on every rank. On failure the rank's own commit is left as it was
  // (Note [Elastic commit], step 5).
  absl::Status Broadcast(Communicator& comm, int root);

  // The last commit as a checkpoint (paddle/checkpoint): tensors "model/..." and the
  // optimizer's, ints "progress/..." (the global data position among them), "optim/..." and
  // "extra/...". Nothing in it depends on the world size, so a job of any size resumes it
  // (Note [Global data position]). kFailedPrecondition if nothing was committed.
  absl::StatusOr<checkpoint::CheckpointState> ToCheckpoint() const;
  // Makes `state` (from ToCheckpoint, at any world size) the commit and rolls back to it.
  // kInvalidArgument naming what is missing or different when it holds another model, optimizer
  // or set of extras; the live state is then left as it was.
  absl::Status FromCheckpoint(const checkpoint::CheckpointState& state);

  // Bytes one commit copies (for logs and the commit-cost figure).
  int64_t commit_bytes() const { return commit_bytes_; }

 private:
  absl::Status CopyInto(std::map<std::string, Tensor>* tensors,
                        std::map<std::string, int64_t>* ints) const;

  nn::Module* model_;
  optim::Optimizer* optimizer_;
  TrainProgress progress_;
  std::map<std::string, int64_t> extras_;

  bool committed_ = false;
  TrainProgress committed_progress_;
  std::map<std::string, int64_t> committed_extras_;
  // "model/<name>" and the optimizer's "optim/..." keys, host copies.
  std::map<std::string, Tensor> committed_tensors_;
  std::map<std::string, int64_t> committed_ints_;
  int64_t commit_bytes_ = 0;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_ELASTIC_STATE_H_
