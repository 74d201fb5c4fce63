// The optimizer of examples:fashion_mnist: the rule that --optimizer names, built over the whole
// model or, with --shard-optimizer, wrapped in a ZeroRedundancyOptimizer that keeps only this
// rank's slice of its state (paddle/parallel/zero_redundancy_optimizer.h).
#ifndef EXAMPLES_FASHION_MNIST_OPTIMIZER_H_
#define EXAMPLES_FASHION_MNIST_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/tensor.h"
#include "paddle/optim/optimizer.h"
#include "paddle/parallel/zero_redundancy_optimizer.h"

namespace paddle::examples {

// --optimizer, --lr, --momentum, --weight-decay (lr and weight_decay < 0: the rule's default).
struct OptimizerFlags {
  std::string name = "sgd";  // sgd | adam | lars | lamb
  double lr = -1;
  double momentum = 0.9;
  double weight_decay = -1;
};

// The rule, for whole parameters or a rank's shard views; an unknown name fails when called.
OptimizerFactory RuleFactory(const OptimizerFlags& flags);
// The rule over whole parameters.
absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeRule(const OptimizerFlags& flags,
                                                           std::vector<autograd::Variable> params);

// The run's optimizer: exactly one of the two is set.
struct RunOptimizer {
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundancyOptimizer> sharded;

  double lr() const { return sharded ? sharded->lr() : plain->lr(); }
  void set_lr(double lr);
  void ZeroGrad();
  absl::Status Step();
  // This rank's optimizer state.
  int64_t StateBytes() const;
  // The whole state; collective when sharded (every rank must call it).
  absl::Status SaveState(std::map<std::string, Tensor>* tensors,
                         std::map<std::string, int64_t>* ints) const;
  absl::Status LoadState(const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, int64_t>& ints);
};

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_OPTIMIZER_H_
