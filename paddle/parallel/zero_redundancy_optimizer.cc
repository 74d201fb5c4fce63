// ZeroRedundancyOptimizer: the flat layout, the step's three collectives, and whole-state
// checkpoints (zero_redundancy_optimizer.h).
#include "paddle/parallel/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/fnv1a.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// The unsharded optimizer's checkpoint keys (paddle/optim/optimizer.h).
std::string StepKey() { return "optim/step"; }
std::string ParamKey(const std::string& param, const std::string& what) {
  return absl::StrCat("optim/", param, "/", what);
}

// Copies `n` elements of `dtype` from src[src_at] to dst[dst_at].
void CopyElements(const Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t n) {
  const size_t e = DTypeSize(dst.dtype());
  std::memcpy(static_cast<char*>(dst.data()) + dst_at * e,
              static_cast<const char*>(src.data()) + src_at * e, n * e);
}

template <typename Options, typename Rule>
OptimizerFactory MakeFactory(Options options) {
  return [options](const ShardSet& shards) -> absl::StatusOr<std::unique_ptr<optim::Optimizer>> {
    Options o = options;
    o.exclude = shards.Exclude(options.exclude);
    ASSIGN_OR_RETURN(std::unique_ptr<Rule> rule, Rule::Create(shards.views, std::move(o)));
    return std::unique_ptr<optim::Optimizer>(std::move(rule));
  };
}

}  // namespace

optim::ExcludePredicate ShardSet::Exclude(optim::ExcludePredicate whole) const {
  if (!whole) whole = optim::ExcludeBelow2D;
  return [whole = std::move(whole), params = params](const std::string& name,
                                                     const autograd::Variable& view) {
    auto it = params.find(name);
    return whole(name, it == params.end() ? view : it->second);
  };
}

OptimizerFactory SgdFactory(optim::SgdOptions options) {
  return MakeFactory<optim::SgdOptions, optim::Sgd>(std::move(options));
}
OptimizerFactory AdamFactory(optim::AdamOptions options) {
  return MakeFactory<optim::AdamOptions, optim::Adam>(std::move(options));
}
OptimizerFactory LarsFactory(optim::LarsOptions options) {
  return MakeFactory<optim::LarsOptions, optim::Lars>(std::move(options));
}
OptimizerFactory LambFactory(optim::LambOptions options) {
  return MakeFactory<optim::LambOptions, optim::Lamb>(std::move(options));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<autograd::Variable> params,
                                                 Communicator* comm)
    : comm_(comm), params_(std::move(params)) {}

std::string ZeroRedundancyOptimizer::Where() const {
  return absl::StrCat("ZeroRedundancyOptimizer rank ", comm_->rank(), "/", comm_->world_size());
}

absl::Status ZeroRedundancyOptimizer::Wait(const std::shared_ptr<Work>& work,
                                           const std::string& what) const {
  return Annotate(work->Wait(), absl::StrCat(Where(), ": ", what));
}

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Create(
    std::vector<autograd::Variable> params, Communicator* comm, const OptimizerFactory& factory) {
  if (comm == nullptr || !factory) {
    return absl::InvalidArgumentError(
        "ZeroRedundancyOptimizer: needs a communicator and a factory");
  }
  std::unique_ptr<ZeroRedundancyOptimizer> zero(
      new ZeroRedundancyOptimizer(std::move(params), comm));
  RETURN_IF_ERROR(zero->Build(factory));
  return zero;
}

absl::Status ZeroRedundancyOptimizer::Build(const OptimizerFactory& factory) {
  const int rank = comm_->rank();
  const int world = comm_->world_size();
  // Local checks, then agreement: every rank must lay out the same flat buffer.
  std::string description;
  std::set<std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) {
    const autograd::Variable& p = params_[i];
    if (!p.defined() || p.name().empty() || !names.insert(p.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(), ": parameter #", i, " is undefined, unnamed or named like an ",
                       "earlier one; state is keyed by unique names"));
    }
    const Tensor& value = p.data();
    if (i == 0) dtype_ = value.dtype();
    if (!value.device().is_cpu() || !value.is_contiguous() || value.dtype() != dtype_ ||
        (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": parameter '", p.name(), "' is ", value.ToString(),
          "; sharding needs contiguous CPU parameters of one dtype, float32 or float64 (the first "
          "is ",
          DTypeName(dtype_), ")"));
    }
    offsets_.push_back(numel_);
    numel_ += value.numel();
    absl::StrAppend(&description, p.name(), " ", value.ToString(), ";");
  }
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({2}, DType::kInt64));
  mine.data<int64_t>()[0] = numel_;
  mine.data<int64_t>()[1] = static_cast<int64_t>(Fnv1a(description));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({world, 2}, DType::kInt64));
  RETURN_IF_ERROR(Wait(comm_->Allgather(mine, all), "comparing parameter layouts"));
  std::vector<std::string> counts;
  bool same = true;
  for (int r = 0; r < world; ++r) {
    const int64_t* a = all.data<int64_t>() + 2 * r;
    same = same && a[0] == numel_ && a[1] == mine.data<int64_t>()[1];
    counts.push_back(absl::StrCat("rank ", r, ": ", a[0]));
  }
  if (!same) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(),
                     ": ranks passed different parameters (names, dtypes or shapes); "
                     "elements per rank: ",
                     absl::StrJoin(counts, ", ")));
  }

  // Note [Flat shards].
  block_ = (numel_ + world - 1) / world;
  begin_ = std::min(numel_, rank * block_);
  end_ = std::min(numel_, begin_ + block_);
  ASSIGN_OR_RETURN(flat_param_, Tensor::Zeros({world * block_}, dtype_));
  ASSIGN_OR_RETURN(flat_grad_, Tensor::Zeros({world * block_}, dtype_));
  ASSIGN_OR_RETURN(shard_grad_, Tensor::Zeros({block_}, dtype_));
  ASSIGN_OR_RETURN(shard_send_, Tensor::Zeros({block_}, dtype_));
  steps_.assign(params_.size(), 0);

  // Note [Flat homes]; then the replicas start from rank 0's values.
  for (size_t i = 0; i < params_.size(); ++i) {
    RETURN_IF_ERROR(AdoptValue(i));
    const Tensor& value = params_[i].data();
    ASSIGN_OR_RETURN(Tensor flat_grad,
                     flat_grad_.Slice(0, offsets_[i], offsets_[i] + value.numel()));
    ASSIGN_OR_RETURN(Tensor grad, flat_grad.View(value.shape()));
    if (params_[i].grad().defined()) RETURN_IF_ERROR(grad.CopyFrom(params_[i].grad()));
    RETURN_IF_ERROR(Annotate(params_[i].set_grad(grad), Where()));
  }
  RETURN_IF_ERROR(Wait(comm_->Broadcast(flat_param_, 0), "broadcasting rank 0's parameters"));

  // Note [Shard views].
  ShardSet shards;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t at = offsets_[i];
    const int64_t n = params_[i].data().numel();
    const int64_t first = std::max(begin_, at) - at;
    const int64_t last = std::min(end_, at + n) - at;
    shards.params[params_[i].name()] = params_[i];
    if (first >= last) continue;
    ASSIGN_OR_RETURN(Tensor value, flat_param_.Slice(0, at + first, at + last));
    ASSIGN_OR_RETURN(Tensor grad, shard_grad_.Slice(0, at + first - begin_, at + last - begin_));
    autograd::Variable view(value, /*requires_grad=*/true, params_[i].name());
    RETURN_IF_ERROR(view.set_grad(grad));
    shards.views.push_back(view);
    pieces_.push_back(Piece{static_cast<int>(i), first, last});
  }
  absl::StatusOr<std::unique_ptr<optim::Optimizer>> made = factory(shards);
  if (!made.ok()) return Annotate(made.status(), Where());
  optimizer_ = *std::move(made);
  if (optimizer_ == nullptr || optimizer_->num_params() != static_cast<int64_t>(pieces_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": the factory must return an optimizer over exactly the ",
                     pieces_.size(), " shard views it was given"));
  }
  const int per_param = optimizer_->num_norm_sums();
  if (per_param > 0) {
    optimizer_->set_norm_combiner(
        [this, per_param](std::vector<double>* sums) { return CombineNorms(sums, per_param); });
  }
  return absl::OkStatus();
}

// Note [Layer norms across ranks]: each rank's partial sums at their parameter's place, zeros
// elsewhere, summed over ranks. A layer within one slice is summed with zeros only, so its norm
// is exactly the unsharded optimizer's.
absl::Status ZeroRedundancyOptimizer::CombineNorms(std::vector<double>* sums, int per_param) {
  const int64_t total = static_cast<int64_t>(params_.size()) * per_param;
  ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({total}, DType::kFloat64));
  double* a = all.data<double>();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    for (int j = 0; j < per_param; ++j)
      a[pieces_[i].param * per_param + j] = (*sums)[i * per_param + j];
  }
  RETURN_IF_ERROR(Wait(comm_->Allreduce(all, ReduceOp::kSum),
                       absl::StrCat("allreducing ", total, " layer sums of squares")));
  for (size_t i = 0; i < pieces_.size(); ++i) {
    for (int j = 0; j < per_param; ++j)
      (*sums)[i * per_param + j] = a[pieces_[i].param * per_param + j];
  }
  return absl::OkStatus();
}

bool ZeroRedundancyOptimizer::IsHome(const Tensor& t, const Tensor& flat, size_t i) const {
  return t.data() == static_cast<char*>(flat.data()) + offsets_[i] * DTypeSize(dtype_) &&
         t.is_contiguous() && t.numel() == params_[i].data().numel();
}

absl::Status ZeroRedundancyOptimizer::AdoptValue(size_t i) {
  const Tensor& value = params_[i].data();
  ASSIGN_OR_RETURN(Tensor flat, flat_param_.Slice(0, offsets_[i], offsets_[i] + value.numel()));
  ASSIGN_OR_RETURN(Tensor home, flat.View(value.shape()));
  RETURN_IF_ERROR(home.CopyFrom(value));
  return Annotate(params_[i].set_data(home), Where());
}

absl::Status ZeroRedundancyOptimizer::Step() {
  autograd::NoGradGuard no_grad;
  const int64_t step = optimizer_->step_count() + 1;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t numel = (i + 1 < params_.size() ? offsets_[i + 1] : numel_) - offsets_[i];
    const autograd::Variable& p = params_[i];
    const Tensor& g = p.grad();
    const Tensor& v = p.data();
    if (!v.device().is_cpu() || v.dtype() != dtype_ || v.numel() != numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": step ", step, ": parameter '", p.name(), "' is now ", v.ToString(),
          "; its value may be replaced, but not by another dtype, size or device"));
    }
    if (!g.defined() || !g.is_contiguous() || !g.device().is_cpu() || g.dtype() != dtype_ ||
        g.numel() != numel) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": step ", step, ": parameter '", p.name(), "' has gradient ",
          g.defined() ? g.ToString() : "undefined", "; every parameter needs a contiguous CPU ",
          DTypeName(dtype_), " gradient on every rank (its peers now wait in the reduce-scatter)"));
    }
  }
  // Note [Flat homes]: values replaced since the last step move back home; gradients kept
  // elsewhere are copied in.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!IsHome(params_[i].data(), flat_param_, i)) RETURN_IF_ERROR(AdoptValue(i));
    const Tensor& g = params_[i].grad();
    if (!IsHome(g, flat_grad_, i)) CopyElements(flat_grad_, offsets_[i], g, 0, g.numel());
  }
  // 1. This rank's slice of the averaged gradients.
  RETURN_IF_ERROR(Wait(comm_->ReduceScatter(flat_grad_, shard_grad_, ReduceOp::kAvg),
                       absl::StrCat("step ", step, ": reduce-scattering ", numel_, " gradients")));
  // 2. The slice's update, in place through the views.
  RETURN_IF_ERROR(Annotate(optimizer_->Step(), Where()));
  // 3. Every rank's updated slice into every replica, straight into the parameters.
  CopyElements(shard_send_, 0, flat_param_, begin_, end_ - begin_);
  RETURN_IF_ERROR(Wait(comm_->Allgather(shard_send_, flat_param_),
                       absl::StrCat("step ", step, ": all-gathering ", numel_, " parameters")));
  flat_param_.BumpVersion();  // Note [Version counters] in paddle/core/storage.h
  for (int64_t& s : steps_) ++s;
  return absl::OkStatus();
}

void ZeroRedundancyOptimizer::ZeroGrad() {
  for (autograd::Variable& p : params_) p.ZeroGrad();
}

// Note [Sharded checkpoints]: the whole state is all-gathered, one slot at a time through the
// flat buffer, and written in the unsharded optimizer's keys and shapes; LoadState slices it
// again. Every rank so holds the whole state for a moment (W times the sharded state): simple,
// and it makes the checkpoint independent of the world size.
absl::Status ZeroRedundancyOptimizer::SaveState(std::map<std::string, Tensor>* tensors,
                                                std::map<std::string, int64_t>* ints) const {
  if (tensors == nullptr || ints == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": SaveState needs two maps"));
  }
  const std::vector<std::string>& slots = optimizer_->slot_names();
  ASSIGN_OR_RETURN(Tensor send, Tensor::Zeros({block_}, dtype_));
  ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({comm_->world_size() * block_}, dtype_));
  std::map<std::string, Tensor> out;
  for (size_t s = 0; s < slots.size(); ++s) {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const Piece& piece = pieces_[i];
      CopyElements(send, offsets_[piece.param] + piece.first - begin_,
                   optimizer_->state(static_cast<int64_t>(i), static_cast<int>(s)), 0,
                   piece.last - piece.first);
    }
    RETURN_IF_ERROR(Wait(comm_->Allgather(send, gathered),
                         absl::StrCat("saving: all-gathering optimizer slot '", slots[s], "'")));
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& value = params_[i].data();
      ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(value.shape(), dtype_));
      CopyElements(t, 0, gathered, offsets_[i], value.numel());
      out[ParamKey(params_[i].name(), slots[s])] = std::move(t);
    }
  }
  for (auto& [key, t] : out) (*tensors)[key] = std::move(t);
  (*ints)[StepKey()] = optimizer_->step_count();
  for (size_t i = 0; i < params_.size(); ++i)
    (*ints)[ParamKey(params_[i].name(), "step")] = steps_[i];
  return absl::OkStatus();
}

absl::Status ZeroRedundancyOptimizer::LoadState(const std::map<std::string, Tensor>& tensors,
                                                const std::map<std::string, int64_t>& ints) {
  std::vector<int64_t> steps;
  for (const autograd::Variable& p : params_) {
    auto it = ints.find(ParamKey(p.name(), "step"));
    if (it == ints.end() || it->second < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": loading: integer '", ParamKey(p.name(), "step"), "' is missing or negative"));
    }
    steps.push_back(it->second);
  }
  // Every parameter's whole state is checked, so that all ranks refuse a bad checkpoint alike;
  // the optimizer gets its own keys with each slot cut to this rank's piece.
  std::map<std::string, Tensor> local;
  std::vector<const Piece*> piece_of(params_.size(), nullptr);
  for (const Piece& piece : pieces_) piece_of[piece.param] = &piece;
  for (size_t i = 0; i < params_.size(); ++i) {
    const autograd::Variable& p = params_[i];
    for (const std::string& slot : optimizer_->slot_names()) {
      const std::string key = ParamKey(p.name(), slot);
      auto it = tensors.find(key);
      if (it == tensors.end() || !it->second.defined() || it->second.shape() != p.data().shape() ||
          it->second.dtype() != dtype_ || !it->second.device().is_cpu()) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(), ": loading: tensor '", key, "' is ",
            it == tensors.end() ? "missing"
                                : (it->second.defined() ? it->second.ToString() : "undefined"),
            ", expected the whole state, like ", p.data().ToString()));
      }
      if (piece_of[i] == nullptr) continue;
      ASSIGN_OR_RETURN(Tensor whole, it->second.Contiguous());
      ASSIGN_OR_RETURN(Tensor flat, whole.View({-1}));
      ASSIGN_OR_RETURN(local[key], flat.Slice(0, piece_of[i]->first, piece_of[i]->last));
    }
  }
  RETURN_IF_ERROR(Annotate(optimizer_->LoadState(local, ints), absl::StrCat(Where(), ": loading")));
  steps_ = std::move(steps);
  return absl::OkStatus();
}

}  // namespace paddle
