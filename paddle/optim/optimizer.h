// Optimizer: the base of every parameter-update rule in paddle/optim (SGD, Adam/AdamW, LARS, LAMB).
//
// An optimizer owns, per parameter, its state tensors ("slots": momentum buffers, Adam moments) and
// a per-parameter update count, and updates each parameter's value in place, through the
// Variable's data() memory, so views of that memory (a reducer's buckets, a checkpoint writer)
// see the new values without a copy. Parameters are float32 or float64, contiguous, on the CPU;
// or, for optimizers that say so (SupportsCuda: SGD), contiguous float32 on a CUDA device, with
// their state on that device and the update run by a GPU kernel (Note [CUDA parameters]).
//
// Construction goes through each optimizer's static Create, which validates the parameters (every
// one defined, named, names unique, a supported dtype and layout) and allocates zeroed state, so a
// constructed optimizer is always usable.
//
// Note [Step is all or nothing]: Step() first checks every parameter that has a gradient (value
// still contiguous CPU memory, gradient contiguous CPU memory) and only then updates; a bad
// parameter or gradient is reported without any parameter having moved. Parameters whose gradient
// is undefined (no backward pass reached them) are skipped: neither their value, state nor update
// count changes, as in PyTorch.
//
// Note [Excluded parameters]: weight decay and layer-wise adaptation (the LARS and LAMB trust
// ratios) hurt parameters that only shift or scale activations: biases and batch-norm gamma/beta
// (Goyal et al. 2017; You et al. 2017, 2019). By default every parameter with fewer than two
// dimensions is excluded from both; an `ExcludePredicate` in the options overrides that choice.
// Unlike PyTorch, this applies to SGD and Adam weight decay too; pass `ExcludeNone()` to decay all.
//
// Note [CUDA parameters]: for a CUDA parameter Step() checks the gradient is on the parameter's
// device and then enqueues the update on the calling thread's op stream (paddle/ops/cuda/handles.h,
// asynchronous like every GPU op). A launch failure is returned as it happens, so unlike the CPU
// path an error on the GPU can leave earlier parameters updated. Adam, LARS and LAMB reject CUDA
// parameters in Create (kUnimplemented). SaveState copies CUDA state to the host; LoadState copies
// host state onto the device.
//
// Note [Lazy sparse updates]: a parameter with a sparse gradient (Variable::sparse_grad(), Note
// [Sparse gradients] in paddle/core/autograd/sparse_rows.h) is updated row-wise and lazily, as
// torch.optim.SparseAdam does: Step() coalesces the gradient (duplicate ids summed), gathers the
// touched rows of the value and of every state slot into contiguous buffers, runs the optimizer's
// own Update() on them, and scatters them back. Rows not in the gradient keep their value and
// their state (momentum, moments, Adagrad sums) untouched: no momentum drift and no moment decay
// while a row is unused, which is where lazy and dense updates differ. The touched rows get
// exactly the dense rule, with the parameter's update count as the step (so Adam's bias
// correction counts the parameter's steps, not the row's) and weight decay on those rows only.
// A row that, once touched, is touched at every later step ends bit-identical to the dense
// update; for Adagrad and momentum-free SGD without weight decay an untouched row does not move
// under the dense rule either, so lazy = dense always. Optimizers whose rule looks at the whole
// tensor (LARS, LAMB trust ratios) do not support it: Step() returns kUnimplemented.
//
// Note [Layer norms across ranks]: LARS and LAMB scale each parameter's step by norms of the whole
// tensor. They implement Update() as two phases, NormSums() (sums of squares; LAMB also updates its
// moments there) and ApplyNorms() (the update from the totals), with the same arithmetic as one
// pass. A sharded optimizer (paddle/parallel/zero_redundancy_optimizer.h) steps views of slices of
// parameters; its NormCombiner, called once per Step() between the phases on every rank, adds up
// the partial sums of each parameter's slices over the ranks (one small allreduce). Without a
// combiner, Step() runs Update() as before.
//
// Checkpoint state (SaveState/LoadState) uses the keys
//   "optim/step"                  ints:    number of Step() calls
//   "optim/<param>/step"          ints:    number of updates of that parameter
//   "optim/<param>/<slot>"        tensors: one per slot, shape and dtype of the parameter
// so it can share maps with the model's own tensors.
#ifndef PADDLE_OPTIM_OPTIMIZER_H_
#define PADDLE_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/tensor.h"

namespace paddle::optim {

// True for parameters excluded from weight decay and trust ratios; see Note [Excluded parameters].
using ExcludePredicate =
    std::function<bool(const std::string& name, const autograd::Variable& param)>;

// The default: parameters with fewer than two dimensions.
bool ExcludeBelow2D(const std::string& name, const autograd::Variable& param);
// Excludes nothing (PyTorch's behaviour).
ExcludePredicate ExcludeNone();

// Note [Layer norms across ranks]: `sums` holds num_norm_sums() entries per parameter, in parameter
// order, this rank's partial sums (0 for parameters without a gradient); on OK it holds the totals.
using NormCombiner = std::function<absl::Status(std::vector<double>* sums)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (dense, or sparse: Note [Lazy sparse
  // updates]); see Note [Step is all or nothing].
  absl::Status Step();
  // Zeroes every parameter's gradient in place.
  void ZeroGrad();

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_count_; }

  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  const autograd::Variable& param(int64_t i) const { return params_[i].var; }
  bool excluded(int64_t i) const { return params_[i].excluded; }
  // Updates of parameter i so far (less than step_count() if it sometimes had no gradient).
  int64_t param_step(int64_t i) const { return params_[i].step; }
  // State tensor `slot` of parameter i (slot order as in slot_names()).
  const Tensor& state(int64_t i, int slot) const { return params_[i].slots[slot]; }
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  // Bytes of every state slot of every parameter (what sharding divides).
  int64_t StateBytes() const;

  // Note [Layer norms across ranks]: sums of squares per parameter that the rule needs (0: none),
  // and the combiner Step() then calls on every step, even with no gradient at all. A combiner
  // error is returned after the first phase ran: LAMB's moments then moved, the values did not.
  int num_norm_sums() const { return NumNormSums(); }
  void set_norm_combiner(NormCombiner combiner) { norm_combiner_ = std::move(combiner); }

  // Adds deep copies of the state to the maps under the keys above (other entries are kept).
  absl::Status SaveState(std::map<std::string, Tensor>* tensors,
                         std::map<std::string, int64_t>* ints) const;
  // Reads every key above (others are ignored); a missing, mis-shaped or negative entry is an
  // error naming the key, and then nothing has been loaded.
  absl::Status LoadState(const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, int64_t>& ints);

 protected:
  // What Update() sees for one parameter: contiguous memory for value and gradient.
  struct ParamUpdate {
    Tensor value;                // written in place
    Tensor grad;                 // read only
    std::vector<Tensor>* slots;  // state, same shape and dtype as value
    int64_t step;                // 1 on the parameter's first update
    bool excluded;
  };

  // `exclude` null means ExcludeBelow2D.
  Optimizer(std::vector<autograd::Variable> params, double lr, ExcludePredicate exclude,
            std::vector<std::string> slot_names);
  // Validates the parameters and allocates zeroed state; Create() returns its error.
  absl::Status Init();
  // Applies the rule to one parameter. Cannot fail: Step() has validated everything.
  virtual void Update(const ParamUpdate& p) = 0;
  // Note [Layer norms across ranks]: the two phases of Update() for rules that need whole-tensor
  // norms; NormSums writes NumNormSums() values to `sums`, ApplyNorms reads the totals.
  virtual int NumNormSums() const { return 0; }
  virtual void NormSums(const ParamUpdate& /*p*/, double* /*sums*/) {}
  virtual void ApplyNorms(const ParamUpdate& /*p*/, const double* /*sums*/) {}
  // Note [CUDA parameters]: whether UpdateCuda is implemented, and the update of a CUDA parameter
  // (value, gradient and slots on one CUDA device).
  virtual bool SupportsCuda() const { return false; }
  virtual absl::Status UpdateCuda(const ParamUpdate& p);
  // Note [Lazy sparse updates]: whether Update() is a per-element rule that may run on gathered
  // rows.
  virtual bool SupportsSparse() const { return false; }

 private:
  struct ParamState {
    autograd::Variable var;
    bool excluded = false;
    int64_t step = 0;
    Device device;  // where the value was at Create, where the state lives
    std::vector<Tensor> slots;
  };
  // A sparse update in preparation: the coalesced gradient and the gathered rows.
  struct RowUpdate {
    ParamState* param;
    autograd::SparseRows grad;
    Tensor value_rows;
    std::vector<Tensor> slot_rows;
  };
  absl::StatusOr<RowUpdate> PrepareRows(ParamState& p);
  void ScatterRows(const RowUpdate& r);

  std::vector<ParamState> params_;
  std::vector<std::string> slot_names_;
  ExcludePredicate exclude_;
  NormCombiner norm_combiner_;
  double lr_;
  int64_t step_count_ = 0;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_OPTIMIZER_H_
