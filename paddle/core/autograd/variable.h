// Variable: a tensor that takes part in automatic differentiation.
//
// A leaf Variable (a parameter or an input) is made from a tensor; with requires_grad its
// gradient accumulates in grad() on every backward pass until ZeroGrad(). A non-leaf Variable is
// the output of a recorded operation and carries the graph Node (grad_fn) that computes the
// gradients of that operation's inputs. Copies of a Variable share everything (value, gradient,
// hooks), like copies of a Tensor share storage.
//
// Note [Gradient ready hooks]: the data-parallel reducer needs to know the moment a parameter's
// gradient for this backward pass is complete, so that its bucket's allreduce can start while the
// rest of the backward pass runs. A leaf's gradient is complete when its AccumulateGrad node has
// run: the engine runs that node once per backward, after every path to the leaf has delivered
// its contribution. The hooks run right there, on the thread running backward, with the gradient
// already summed into grad().
//
// Note [Gradients as views]: set_grad() lets the gradient be a view into memory owned elsewhere
// (a reducer bucket). Accumulation then writes into that memory in place, and ZeroGrad() zeroes it
// in place, so the view survives every step and no copy is made into or out of the bucket.
#ifndef PADDLE_CORE_AUTOGRAD_VARIABLE_H_
#define PADDLE_CORE_AUTOGRAD_VARIABLE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "paddle/core/autograd/node.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/tensor.h"

namespace paddle::autograd {

class Variable;
using GradReadyHook = std::function<void(const Variable&)>;

class Variable {
 public:
  Variable() = default;  // undefined
  // A leaf.
  explicit Variable(Tensor data, bool requires_grad = false, std::string name = "");
  // The output `output_nr` of the operation whose backward is `grad_fn`.
  static Variable FromNode(Tensor data, std::shared_ptr<Node> grad_fn, int output_nr = 0);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the value (loading a checkpoint, broadcasting parameters, moving to another device);
  // same shape and dtype, any device.
  absl::Status set_data(const Tensor& data);
  const Shape& shape() const { return data().shape(); }
  bool requires_grad() const;
  bool is_leaf() const;
  const std::string& name() const;
  void set_name(std::string name);

  // Leaves only. Undefined until the first backward reaches this leaf or set_grad() is called.
  const Tensor& grad() const;
  // See Note [Gradients as views]; same shape, dtype and device as the value.
  absl::Status set_grad(const Tensor& grad);
  // Zeroes the gradient in place (keeping its memory); nothing to do while it is undefined.
  // A non-CPU gradient is zeroed through DeviceGradientOps (a failure there aborts). Drops the
  // sparse gradient.
  void ZeroGrad();
  // Drops the gradient (it becomes undefined): for moving a parameter to another device.
  void ResetGrad();

  // Note [Sparse gradients] (sparse_rows.h): a sparse parameter's gradient is SparseRows held
  // beside grad(), which stays undefined. Leaves only; set once, before the first backward.
  void set_sparse(bool sparse);
  bool sparse() const;
  // nullptr until a backward pass or set_sparse_grad gave this parameter a sparse gradient.
  const SparseRows* sparse_grad() const;
  // Replaces the sparse gradient (checked against data() by CheckSparseRows).
  absl::Status set_sparse_grad(SparseRows grad);
  // Appends `grad`'s entries (no merging), as backward passes accumulate; does not run the
  // gradient-ready hooks (the reducer exchanges sparse gradients after the backward pass).
  absl::Status AccumulateSparseGrad(const SparseRows& grad);
  // See Note [Gradient ready hooks]. Returns a handle for RemoveGradReadyHook.
  int AddGradReadyHook(GradReadyHook hook);
  void RemoveGradReadyHook(int handle);

  const std::shared_ptr<Node>& grad_fn() const;
  // Where the gradient of this Variable goes: its grad_fn, or the accumulator of a leaf that
  // requires a gradient, or nowhere.
  Edge GradientEdge() const;

  // Backward from this scalar (one element) Variable: gradient 1. Frees the graph unless
  // `retain_graph` (Note [Freed graphs] in node.h).
  absl::Status Backward(bool retain_graph = false) const;

  // Identity, for maps keyed by parameter.
  const void* id() const { return impl_.get(); }

 private:
  struct Impl;
  friend class AccumulateGrad;
  std::shared_ptr<Impl> impl_;
};

// Adds `grad` into a leaf's gradient and runs its hooks. Made by Variable::GradientEdge().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<Variable::Impl> leaf);
  absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override;

 private:
  std::shared_ptr<Variable::Impl> leaf_;
};

// The output of an operation with inputs whose gradient edges are `edges` (Variable::GradientEdge
// of each input, in the order `backward` returns their gradients). Records a FunctionNode named
// `name` only when grad mode is on and some input requires a gradient; otherwise `backward` is
// dropped and the result is a plain leaf that requires nothing.
Variable RecordOperation(Tensor output, const char* name, std::vector<Edge> edges,
                         FunctionNode::BackwardFn backward);
// The same for an operation whose `backward` computes with the tensors in `saved` (Note [Saved
// tensor versions] in node.h): its backward fails once one of them was written in place.
Variable RecordOperation(Tensor output, const char* name, std::vector<Edge> edges,
                         std::vector<SavedTensor> saved, FunctionNode::BackwardFn backward);

// See Note [Gradient arithmetic on devices]. Each function handles tensors of its device type.
struct DeviceGradientOps {
  // dst += src; same shape, dtype and device, dst contiguous.
  std::function<absl::Status(Tensor* dst, const Tensor& src)> accumulate;
  // A new contiguous copy on the same device.
  std::function<absl::StatusOr<Tensor>(const Tensor& t)> clone;
  // Every element of the contiguous `dst` = value.
  std::function<absl::Status(Tensor* dst, float value)> fill;
};
// Registers (or replaces) the operations for `type` (not kCpu); thread-safe.
void SetDeviceGradientOps(DeviceType type, DeviceGradientOps ops);
// The operations for t's device type, or kFailedPrecondition naming the device and `what`.
absl::StatusOr<DeviceGradientOps> GetDeviceGradientOps(const Tensor& t, const char* what);

// A contiguous copy of `t` on its device.
absl::StatusOr<Tensor> CloneGradient(const Tensor& t);
// Every element of the contiguous `dst` = value, on its device.
absl::Status FillGradient(Tensor* dst, float value);

// dst += src for floating-point tensors of the same shape, dtype and device (any strides for src on
// the CPU; DeviceGradientOps elsewhere).
absl::Status AccumulateInto(Tensor* dst, const Tensor& src);
// a + b into a new contiguous tensor (same shape and dtype).
absl::StatusOr<Tensor> AddTensors(const Tensor& a, const Tensor& b);

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_VARIABLE_H_
