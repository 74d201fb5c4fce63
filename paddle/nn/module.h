// Module: a layer or a model, holding named parameters (trained), buffers (state that is saved
// but not trained, such as batch-norm running statistics) and child modules.
//
// Names are dotted paths from the model root ("features.0.weight"), in registration order; a
// child's parameters are renamed with its prefix when it is registered, so every parameter's
// Variable carries its full name. That name is what optimizers key their state by, what
// checkpoints store, and what the data-parallel wrapper compares across ranks.
#ifndef PADDLE_NN_MODULE_H_
#define PADDLE_NN_MODULE_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/core/autograd/variable.h"

namespace paddle::nn {

using autograd::Variable;

class Module {
 public:
  explicit Module(std::string type) : type_(std::move(type)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual absl::StatusOr<Variable> Forward(const Variable& input) = 0;

  // Depth-first in registration order: own entries first, then each child's.
  std::vector<std::pair<std::string, Variable>> NamedParameters() const;
  std::vector<Variable> Parameters() const;
  std::vector<std::pair<std::string, Variable>> NamedBuffers() const;
  // Parameters and buffers by name: views of the live tensors, not copies.
  std::map<std::string, Tensor> StateDict() const;
  // Copies values in; with `strict`, a missing or unexpected name is an error. Any shape or
  // dtype mismatch is an error naming the entry and both shapes. Nothing is changed on error.
  // Values may come from any device; they are copied to where the module's tensors are.
  absl::Status LoadStateDict(const std::map<std::string, Tensor>& state, bool strict = true);

  void ZeroGrad();
  // Moves every parameter and buffer to `device` (copies through ToDevice; values kept, gradients
  // dropped, the Variables themselves stay the same objects so optimizers built later see the
  // moved values). All or nothing: on error (kFailedPrecondition "no CUDA device/driver: ..."
  // without a GPU, kInvalidArgument for a device that does not exist) nothing has moved.
  absl::Status To(Device device);
  // Where the first parameter (else buffer) lives; the CPU for a module with neither.
  Device device() const;
  // Training mode (batch statistics, dropout on) or evaluation mode, for the whole subtree.
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool training() const { return training_; }
  const std::string& type() const { return type_; }
  int64_t NumParameters() const;

 protected:
  Variable RegisterParameter(const std::string& name, Tensor value);
  Variable RegisterBuffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> RegisterModule(const std::string& name, std::shared_ptr<M> module) {
    AddChild(name, module);
    return module;
  }
  // For modules defined outside C++ (python/bindings/py_module.h): registers `v` itself, so the
  // caller's handle is the entry, or replaces the entry of that name in place (keeping its
  // position). A parameter must be a leaf; a buffer must not require a gradient.
  absl::Status SetParameter(const std::string& name, Variable v);
  absl::Status SetBuffer(const std::string& name, Variable v);
  void SetModule(const std::string& name, std::shared_ptr<Module> child);

 private:
  void AddChild(const std::string& name, std::shared_ptr<Module> child);
  void Prefix(const std::string& prefix);

  std::string type_;
  // This module's path in the tree it belongs to ("features.0."), applied to entries registered
  // after it was added to a parent.
  std::string prefix_;
  bool training_ = true;
  std::vector<std::pair<std::string, Variable>> parameters_;
  std::vector<std::pair<std::string, Variable>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace paddle::nn

#endif  // PADDLE_NN_MODULE_H_
