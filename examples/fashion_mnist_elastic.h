// fashion_mnist --elastic: the training loop of an elastic job (paddle/parallel/elastic.h), for
// workers started by `paddlerun --nproc=N --min-nproc=M` (PADDLE_ELASTIC=1). fashion_mnist.cc
// parses the flags and hands over what is its own (the optimizer it builds, its evaluation).
#ifndef EXAMPLES_FASHION_MNIST_ELASTIC_H_
#define EXAMPLES_FASHION_MNIST_ELASTIC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/fashion_mnist_tasks.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/nn/module.h"
#include "paddle/optim/optimizer.h"

namespace paddle::examples {

struct ElasticRun {
  std::string model = "cnn";
  int64_t epochs = 3;
  int64_t batch = 128;  // global batch, whatever the world size
  int64_t seed = 1;
  double warmup_epochs = 0;
  int64_t commit_every = 10;  // K: steps between commits
  double bucket_cap_mb = 1;
  double first_bucket_mb = 1;
  // Rank 0 saves the commit (global state, resumable at any world size) into checkpoint_dir
  // every checkpoint_every steps (0: at epoch ends only); with resume, the workers that start the
  // job take the newest good one there, and rank 0 of the first generation broadcasts it.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  bool resume = false;
  // Per-rank batch fixed at batch / PADDLE_ELASTIC_MAX_SIZE and the LR scaled by world / max
  // (the linear scaling rule), instead of a fixed global batch and LR.
  bool linear_lr_scaling = false;
  data::Dataset train, test;    // train is unused with data == "tasks"
  std::string data = "memory";  // or "tasks": from record shards via the task master
  TaskDataOptions tasks;        // for data == "tasks"
  std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(std::vector<nn::Variable>)>
      make_optimizer;
  std::function<absl::StatusOr<double>(nn::Module&, const data::Dataset&)> evaluate;
  std::function<uint64_t(const nn::Module&)> param_hash;
};

// Trains to the end as a member of the elastic job in the environment; returns the exit status.
int RunElastic(const ElasticRun& run);

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_ELASTIC_H_
