// ZeroRedundancyOptimizer: optimizer state sharded over the ranks of a Communicator (ZeRO stage 1,
// Rajbhandari et al. 2020; the concept of torch.distributed.optim.ZeroRedundancyOptimizer).
//
// Every rank keeps the whole model, but only the optimizer state of its own slice of the
// parameters: Adam's two moments cost 2N/W values per rank instead of 2N. One Step(), on every
// rank:
//   1. the local gradients, which live end to end in one flat buffer (Note [Flat homes]), are
//      reduce-scattered with kAvg, so this rank receives the average of its own slice only;
//   2. the wrapped optimizer (any paddle/optim rule) steps that slice, through shard views
//      (Note [Shard views]); LARS and LAMB combine the norms of sliced layers first (one small
//      allreduce, Note [Layer norms across ranks] in paddle/optim/optimizer.h);
//   3. every rank's updated slice is all-gathered into every replica's parameters.
// Afterwards every replica holds the same parameters, equal to what the unsharded optimizer
// would give on the averaged gradient: bit for bit for SGD, Adam and AdamW (the same arithmetic on
// the same elements), and within rounding for LARS and LAMB when a slice boundary cuts a layer
// (its sum of squares is then added in another order).
//
// Note [Flat shards]: parameters (one dtype, float32 or float64, contiguous on the CPU) are laid
// end to end, N elements in all, padded to W * B with B = ceil(N / W); rank r owns elements
// [r * B, min((r + 1) * B, N)). Equal blocks are what ReduceScatter and Allgather take, and for
// one dtype equal elements are equal bytes. A boundary may cut a tensor; with N < W the last
// ranks own nothing and still join every collective.
//
// Note [Flat homes]: Create moves every parameter's value into one flat buffer and its gradient
// into another (Variable::set_data, and set_grad as in Note [Gradients as views]), so the backward
// pass accumulates straight into the buffer the reduce-scatter sends and the all-gather writes
// straight into the parameters: no copies, and no memory beyond the model, its gradients, the
// slice's state and two blocks. A value replaced later (a loaded state dict) is moved back at the
// next Step(); a gradient that is not the buffer's view (set by someone else, as DDP's reducer
// does) is copied in at each Step().
//
// Note [Shard views]: for each parameter meeting its slice, a rank makes a 1-D Variable that is a
// view into that parameter's memory (same name as the parameter), whose gradient is a view into
// the reduce-scatter's output. The wrapped optimizer steps these views, so it allocates state for
// the slice only, and its update writes the rank's own part of the parameters in place.
// Exclusion (Note [Excluded parameters]) is decided on the whole parameter (ShardSet::Exclude),
// since every view is 1-D.
//
// Gradients: Step() reads each parameter's local grad() (a plain backward on this rank, no DDP
// reduction; the reduce-scatter averages). Every parameter must have a gradient on every rank at
// every Step(): a missing one is kFailedPrecondition on that rank (its peers then fail in the
// reduce-scatter, within the communicator's timeout).
//
// Failure: a collective that fails poisons the communicator (Note [Communicator failure]); the
// parameters are then unspecified. Not thread-safe: one thread drives it, like the optimizers.
//
// Checkpoints (Note [Sharded checkpoints]): SaveState gathers the full state, in the unsharded
// optimizer's keys and shapes; LoadState takes such state and keeps this rank's slice. A
// checkpoint so moves between world sizes, and between sharded and unsharded optimizers.
#ifndef PADDLE_PARALLEL_ZERO_REDUNDANCY_OPTIMIZER_H_
#define PADDLE_PARALLEL_ZERO_REDUNDANCY_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/tensor.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/optimizer.h"
#include "paddle/optim/sgd.h"

namespace paddle {

// What a factory gets: this rank's shard views (Note [Shard views]) and the whole parameters
// they are cut from, by name.
struct ShardSet {
  std::vector<autograd::Variable> views;
  std::map<std::string, autograd::Variable> params;
  // A predicate over the views that answers what `whole` (null: ExcludeBelow2D) answers for the
  // parameter each view is cut from.
  optim::ExcludePredicate Exclude(optim::ExcludePredicate whole) const;
};

// Builds the wrapped optimizer over a rank's shard views.
using OptimizerFactory =
    std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(const ShardSet& shards)>;

// Factories for the paddle/optim rules; `options.exclude` is a predicate over whole parameters.
OptimizerFactory SgdFactory(optim::SgdOptions options);
OptimizerFactory AdamFactory(optim::AdamOptions options);
OptimizerFactory LarsFactory(optim::LarsOptions options);
OptimizerFactory LambFactory(optim::LambOptions options);

class ZeroRedundancyOptimizer {
 public:
  // Collective: every rank of `comm` calls it with the same parameters (names, dtypes, shapes, in
  // order; a mismatch is kInvalidArgument on every rank naming the ranks' element counts). Rank
  // 0's parameter values are broadcast to every rank, as DistributedDataParallel::Create does.
  // `comm` outlives the result.
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Create(
      std::vector<autograd::Variable> params, Communicator* comm, const OptimizerFactory& factory);
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Collective: steps 1-3 of the file comment.
  absl::Status Step();
  // Zeroes every parameter's local gradient.
  void ZeroGrad();

  double lr() const { return optimizer_->lr(); }
  void set_lr(double lr) { optimizer_->set_lr(lr); }
  int64_t step_count() const { return optimizer_->step_count(); }

  // Bytes of this rank's optimizer state (the unsharded optimizer's divided by about W).
  int64_t OptimizerStateBytes() const { return optimizer_->StateBytes(); }
  // This rank's slice of the flat parameters, [shard_begin, shard_end) (Note [Flat shards]).
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  int64_t numel() const { return numel_; }
  // The wrapped optimizer over this rank's views.
  const optim::Optimizer& local_optimizer() const { return *optimizer_; }

  // Note [Sharded checkpoints]. Collective: adds the whole state under the unsharded optimizer's
  // keys (optimizer.h) to the maps on every rank.
  absl::Status SaveState(std::map<std::string, Tensor>* tensors,
                         std::map<std::string, int64_t>* ints) const;
  // Local: reads whole state (saved at any world size, or by the unsharded optimizer) and keeps
  // this rank's slice. A missing or mis-shaped entry is an error naming the key, and then nothing
  // has been loaded.
  absl::Status LoadState(const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, int64_t>& ints);

 private:
  // A parameter's piece of this rank's slice: its elements [first, last) are flat elements
  // [flat + first, flat + last).
  struct Piece {
    int param = 0;
    int64_t first = 0;
    int64_t last = 0;
  };

  ZeroRedundancyOptimizer(std::vector<autograd::Variable> params, Communicator* comm);
  absl::Status Build(const OptimizerFactory& factory);
  absl::Status CombineNorms(std::vector<double>* sums, int per_param);
  // Note [Flat homes]: copies parameter i's value into flat_param_ and makes it a view of it.
  absl::Status AdoptValue(size_t i);
  // Whether `t` is the view of `flat` at parameter i's place.
  bool IsHome(const Tensor& t, const Tensor& flat, size_t i) const;
  absl::Status Wait(const std::shared_ptr<Work>& work, const std::string& what) const;
  std::string Where() const;

  Communicator* comm_;
  std::vector<autograd::Variable> params_;
  std::vector<int64_t> offsets_;  // flat offset of each parameter
  std::vector<int64_t> steps_;    // updates of each parameter, for SaveState
  std::vector<Piece> pieces_;     // in parameter order; pieces_[i] is the optimizer's param i
  DType dtype_ = DType::kFloat32;
  int64_t numel_ = 0;
  int64_t block_ = 0;  // B of Note [Flat shards]
  int64_t begin_ = 0;
  int64_t end_ = 0;
  Tensor flat_param_;  // W * B elements: every parameter's value (Note [Flat homes])
  Tensor flat_grad_;   // W * B elements: every parameter's gradient
  Tensor shard_grad_;  // B elements: this rank's averaged gradients
  Tensor shard_send_;  // B elements: this rank's updated parameters
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_ZERO_REDUNDANCY_OPTIMIZER_H_
