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
  data::Dataset train, test;
  std::function<absl::StatusOr<std::unique_ptr<optim::Optimizer>>(std::vector<nn::Variable>)>
      make_optimizer;
  std::function<absl::StatusOr<double>(nn::Module&, const data::Dataset&)> evaluate;
  std::function<uint64_t(const nn::Module&)> param_hash;
};

// Trains to the end as a member of the elastic job in the environment; returns the exit status.
int RunElastic(const ElasticRun& run);

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_ELASTIC_H_
