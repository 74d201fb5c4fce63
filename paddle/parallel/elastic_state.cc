// ElasticState: commit, rollback and broadcast of one replica's training state.
//
// Note [Elastic commit]
// A commit is taken by every rank, locally (no collective), right after the optimizer step of
// every K-th step, and also right before a planned membership change (paddle/parallel/elastic.h).
// It is a point all ranks agree on because of how a step works:
//  1. each rank computes its gradient and enters the step's allreduces;
//  2. a rank's allreduce Work completes only once the full sum has arrived on it, so every rank
//     whose Work succeeded holds the same averaged gradient, including the contribution of a
//     rank that has died since;
//  3. the optimizer step is deterministic, so every such rank reaches the same parameters and
//     commits the same state at the same step number;
//  4. a rank whose allreduce failed (a peer died mid-step) applies nothing and never commits
//     that step; it rolls back to its previous commit.
// What a rank that dies between its allreduce and the commit can cause: survivors whose last
// commits differ by one commit interval (some finished the step's allreduce before the failure
// poisoned the communicator, others did not). The next generation resolves it: members are
// ordered by their commit step, highest first, and rank 0 of the new generation broadcasts its
// commit to everyone (Broadcast below). Its state is legitimate: it is what training would have
// reached had the dead rank died just after that step. At most K steps of work per failure are
// lost, and the data position is part of the commit, so the samples of lost steps are trained on
// again, each sample once in the history that survives.
// What it cannot cause: a commit built from a partial sum (step 2), replicas that silently
// differ after recovery (everyone adopts rank 0's commit, and DistributedDataParallel::Create
// checks the model again), or a damaged commit:
//  5. a failure during the broadcast of a recovery (a second death) leaves every rank's own
//     commit untouched, because the broadcast receives into fresh buffers and replaces the commit
//     only once every tensor has arrived; the next generation starts from it again.
// A rank that dies inside Commit() only loses its own copy: it is dead, and commits are local.
//
// Note [Global data position]
// The data position is "samples of the epoch consumed by all ranks together", never a per-rank
// offset. Each step consumes one global batch from a permutation of the data set that depends
// only on (seed, epoch); the ranks split the batch among themselves (paddle/parallel/
// global_batch.h). Any world size, after any membership change, therefore continues with exactly
// the samples not yet seen.
#include "paddle/parallel/elastic_state.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/status.h"
#include "paddle/nn/device_dispatch.h"

namespace paddle {
namespace {

constexpr int kProgressInts = 5;  // epoch, step, samples, loss_sum bits, loss_count

int64_t DoubleBits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

double BitsDouble(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

}  // namespace

ElasticState::ElasticState(nn::Module* model, optim::Optimizer* optimizer)
    : model_(model), optimizer_(optimizer) {}

absl::Status ElasticState::CopyInto(std::map<std::string, Tensor>* tensors,
                                    std::map<std::string, int64_t>* ints) const {
  for (const auto& [name, t] : model_->StateDict()) {
    ASSIGN_OR_RETURN(Tensor host, nn::internal::MoveTensor(t, Device::Cpu()));
    std::string key = absl::StrCat("model/", name);
    auto it = tensors->find(key);
    if (it != tensors->end() && it->second.shape() == host.shape() &&
        it->second.dtype() == host.dtype()) {
      RETURN_IF_ERROR(it->second.CopyFrom(host));  // reuse the previous commit's buffer
    } else {
      ASSIGN_OR_RETURN((*tensors)[key], host.Clone());
    }
  }
  // The optimizer's state is copied by SaveState itself (deep copies, host memory).
  std::map<std::string, Tensor> optim_tensors;
  RETURN_IF_ERROR(optimizer_->SaveState(&optim_tensors, ints));
  for (auto& [key, t] : optim_tensors) (*tensors)[key] = std::move(t);
  return absl::OkStatus();
}

absl::Status ElasticState::Commit() {
  RETURN_IF_ERROR(CopyInto(&committed_tensors_, &committed_ints_));
  committed_progress_ = progress_;
  committed_extras_ = extras_;
  committed_ = true;
  commit_bytes_ = 0;
  for (const auto& [key, t] : committed_tensors_) commit_bytes_ += static_cast<int64_t>(t.nbytes());
  return absl::OkStatus();
}

absl::Status ElasticState::Rollback() {
  if (!committed_) {
    return absl::FailedPreconditionError("ElasticState::Rollback: nothing has been committed yet");
  }
  std::map<std::string, Tensor> model_state;
  for (const auto& [key, t] : committed_tensors_) {
    if (key.rfind("model/", 0) == 0) model_state[key.substr(6)] = t;
  }
  RETURN_IF_ERROR(Annotate(model_->LoadStateDict(model_state), "rolling back the model"));
  RETURN_IF_ERROR(Annotate(optimizer_->LoadState(committed_tensors_, committed_ints_),
                           "rolling back the optimizer"));
  progress_ = committed_progress_;
  extras_ = committed_extras_;
  return absl::OkStatus();
}

absl::Status ElasticState::Broadcast(Communicator& comm, int root) {
  if (!committed_) RETURN_IF_ERROR(Commit());
  const std::string who = absl::StrFormat("elastic state broadcast from rank %d (rank %d of %d)",
                                          root, comm.rank(), comm.world_size());
  // 1. Agree on the layout: entry counts and total bytes, as min and max over ranks.
  auto layout = [&]() -> std::vector<int64_t> {
    return {static_cast<int64_t>(committed_tensors_.size()),
            static_cast<int64_t>(committed_ints_.size()),
            static_cast<int64_t>(committed_extras_.size()), commit_bytes_};
  };
  std::vector<int64_t> mine = layout();
  std::vector<int64_t> lo = mine, hi = mine;
  const auto n = static_cast<int64_t>(mine.size());
  ASSIGN_OR_RETURN(Tensor lo_t, Tensor::FromBlob(lo.data(), {n}, DType::kInt64, Device::Cpu()));
  ASSIGN_OR_RETURN(Tensor hi_t, Tensor::FromBlob(hi.data(), {n}, DType::kInt64, Device::Cpu()));
  RETURN_IF_ERROR(Annotate(comm.Allreduce(lo_t, ReduceOp::kMin)->Wait(), who));
  RETURN_IF_ERROR(Annotate(comm.Allreduce(hi_t, ReduceOp::kMax)->Wait(), who));
  if (lo != hi) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the ranks hold different training states (this rank: %d tensors, %d optimizer "
        "integers, %d extras, %d bytes; the ranks range over tensors %d..%d, bytes %d..%d); "
        "every worker must build the same model and optimizer",
        who, mine[0], mine[1], mine[2], mine[3], lo[0], hi[0], lo[3], hi[3]));
  }
  // 2. The integers: progress, the optimizer's ints, the extras (same keys: same layout).
  const TrainProgress& c = committed_progress_;
  std::vector<int64_t> ints = {c.epoch, c.step, c.samples, DoubleBits(c.loss_sum), c.loss_count};
  for (const auto& [key, v] : committed_ints_) ints.push_back(v);
  for (const auto& [key, v] : committed_extras_) ints.push_back(v);
  ASSIGN_OR_RETURN(Tensor ints_t, Tensor::FromBlob(ints.data(), {static_cast<int64_t>(ints.size())},
                                                   DType::kInt64, Device::Cpu()));
  RETURN_IF_ERROR(Annotate(comm.Broadcast(ints_t, root)->Wait(), who));
  // 3. The tensors, into fresh buffers (Note [Elastic commit], step 5).
  std::map<std::string, Tensor> received;
  for (const auto& [key, t] : committed_tensors_) {
    Tensor buffer = t;
    if (comm.rank() != root) {
      ASSIGN_OR_RETURN(buffer, Tensor::Empty(t.shape(), t.dtype()));
    }
    RETURN_IF_ERROR(Annotate(comm.Broadcast(buffer, root)->Wait(),
                             absl::StrCat(who, ", tensor ", key, " ", t.ToString())));
    received[key] = std::move(buffer);
  }
  // 4. Every piece arrived: it becomes this rank's commit.
  committed_tensors_ = std::move(received);
  committed_progress_ = {ints[0], ints[1], ints[2], BitsDouble(ints[3]), ints[4]};
  size_t i = kProgressInts;
  for (auto& [key, v] : committed_ints_) v = ints[i++];
  for (auto& [key, v] : committed_extras_) v = ints[i++];
  return Rollback();
}

absl::StatusOr<checkpoint::CheckpointState> ElasticState::ToCheckpoint() const {
  if (!committed_) {
    return absl::FailedPreconditionError("ElasticState::ToCheckpoint: nothing committed yet");
  }
  checkpoint::CheckpointState out;
  out.tensors = committed_tensors_;  // shares the commit's buffers; the writer only reads them
  out.ints = committed_ints_;        // the optimizer's, all "optim/..."
  const TrainProgress& c = committed_progress_;
  out.ints["progress/epoch"] = c.epoch;
  out.ints["progress/step"] = c.step;
  out.ints["progress/samples"] = c.samples;
  out.ints["progress/loss_sum_bits"] = DoubleBits(c.loss_sum);
  out.ints["progress/loss_count"] = c.loss_count;
  for (const auto& [key, v] : committed_extras_) out.ints[absl::StrCat("extra/", key)] = v;
  return out;
}

absl::Status ElasticState::FromCheckpoint(const checkpoint::CheckpointState& state) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elastic checkpoint: ", what,
        "; it was written by another model, optimizer or program (start without --resume, or "
        "point --checkpoint-dir elsewhere)"));
  };
  auto get = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    auto it = state.ints.find(key);
    if (it == state.ints.end()) return bad(absl::StrCat("integer '", key, "' is missing"));
    return it->second;
  };
  // 1. Check everything before touching the live state.
  TrainProgress p;
  ASSIGN_OR_RETURN(p.epoch, get("progress/epoch"));
  ASSIGN_OR_RETURN(p.step, get("progress/step"));
  ASSIGN_OR_RETURN(p.samples, get("progress/samples"));
  ASSIGN_OR_RETURN(int64_t loss_bits, get("progress/loss_sum_bits"));
  ASSIGN_OR_RETURN(p.loss_count, get("progress/loss_count"));
  p.loss_sum = BitsDouble(loss_bits);
  if (p.epoch < 0 || p.step < 0 || p.samples < 0 || p.loss_count < 0) {
    return bad(absl::StrFormat("negative progress (epoch %d, step %d, samples %d)", p.epoch, p.step,
                               p.samples));
  }
  std::map<std::string, int64_t> extras;
  for (const auto& [key, v] : extras_) {
    ASSIGN_OR_RETURN(extras[key], get(absl::StrCat("extra/", key)));
  }
  std::map<std::string, int64_t> ints;
  int64_t model_entries = 0;
  for (const auto& [key, v] : state.ints) {
    if (key.rfind("optim/", 0) == 0) ints[key] = v;
    if (key.rfind("extra/", 0) == 0 && extras.count(key.substr(6)) == 0) {
      return bad(absl::StrCat("extra '", key.substr(6), "' is not one of this program's"));
    }
  }
  for (const auto& [name, t] : model_->StateDict()) {
    auto it = state.tensors.find(absl::StrCat("model/", name));
    if (it == state.tensors.end()) return bad(absl::StrCat("model tensor '", name, "' is missing"));
    if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      return bad(absl::StrCat("model tensor '", name, "' is ", it->second.ToString(),
                              ", the model's is ", t.ToString()));
    }
    ++model_entries;
  }
  for (const auto& [key, t] : state.tensors) {
    if (key.rfind("model/", 0) == 0) --model_entries;
  }
  if (model_entries != 0) return bad("it holds model tensors this model does not have");
  // The optimizer checks its own keys and loads nothing on error.
  RETURN_IF_ERROR(Annotate(optimizer_->LoadState(state.tensors, ints), "elastic checkpoint"));
  // 2. It becomes the commit, and the live state rolls back to it.
  committed_tensors_.clear();
  for (const auto& [key, t] : state.tensors) {
    if (key.rfind("model/", 0) == 0 || key.rfind("optim/", 0) == 0) committed_tensors_[key] = t;
  }
  committed_ints_ = std::move(ints);
  committed_progress_ = p;
  committed_extras_ = std::move(extras);
  committed_ = true;
  commit_bytes_ = 0;
  for (const auto& [key, t] : committed_tensors_) commit_bytes_ += static_cast<int64_t>(t.nbytes());
  return Rollback();
}

}  // namespace paddle
