// The optimizer of examples:fashion_mnist (fashion_mnist_optimizer.h).
#include "examples/fashion_mnist_optimizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/sgd.h"

namespace paddle::examples {

OptimizerFactory RuleFactory(const OptimizerFlags& f) {
  if (f.name == "sgd") {
    optim::SgdOptions s;
    s.lr = f.lr > 0 ? f.lr : 0.05;
    s.momentum = f.momentum;
    s.weight_decay = f.weight_decay >= 0 ? f.weight_decay : 0;
    return SgdFactory(s);
  }
  if (f.name == "adam") {
    optim::AdamOptions a;
    a.lr = f.lr > 0 ? f.lr : 1e-3;
    a.weight_decay = f.weight_decay >= 0 ? f.weight_decay : 0;
    return AdamFactory(a);
  }
  if (f.name == "lars") {
    optim::LarsOptions l;
    l.lr = f.lr > 0 ? f.lr : 2.0;
    l.momentum = f.momentum;
    l.weight_decay = f.weight_decay >= 0 ? f.weight_decay : 5e-4;
    return LarsFactory(l);
  }
  if (f.name == "lamb") {
    optim::LambOptions l;
    l.lr = f.lr > 0 ? f.lr : 4e-3;
    l.weight_decay = f.weight_decay >= 0 ? f.weight_decay : 0.01;
    return LambFactory(l);
  }
  return [name = f.name](const ShardSet&) -> absl::StatusOr<std::unique_ptr<optim::Optimizer>> {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --optimizer=", name, "; choose sgd, adam, lars or lamb"));
  };
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeRule(const OptimizerFlags& flags,
                                                           std::vector<autograd::Variable> params) {
  ShardSet whole;
  for (const autograd::Variable& v : params) whole.params[v.name()] = v;
  whole.views = std::move(params);
  return RuleFactory(flags)(whole);
}

void RunOptimizer::set_lr(double lr) {
  if (sharded) {
    sharded->set_lr(lr);
  } else {
    plain->set_lr(lr);
  }
}

void RunOptimizer::ZeroGrad() {
  if (sharded) {
    sharded->ZeroGrad();
  } else {
    plain->ZeroGrad();
  }
}

absl::Status RunOptimizer::Step() { return sharded ? sharded->Step() : plain->Step(); }

int64_t RunOptimizer::StateBytes() const {
  return sharded ? sharded->OptimizerStateBytes() : plain->StateBytes();
}

absl::Status RunOptimizer::SaveState(std::map<std::string, Tensor>* tensors,
                                     std::map<std::string, int64_t>* ints) const {
  return sharded ? sharded->SaveState(tensors, ints) : plain->SaveState(tensors, ints);
}

absl::Status RunOptimizer::LoadState(const std::map<std::string, Tensor>& tensors,
                                     const std::map<std::string, int64_t>& ints) {
  return sharded ? sharded->LoadState(tensors, ints) : plain->LoadState(tensors, ints);
}

}  // namespace paddle::examples
