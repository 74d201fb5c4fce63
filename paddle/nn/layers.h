// The layers models are built from: Linear, Conv2d, BatchNorm2d, Dropout, activations, pooling,
// Flatten and Sequential. Weights start as PyTorch's do (uniform in +-1/sqrt(fan_in) for weights
// and biases of Linear and Conv2d; gamma 1, beta 0 for batch norm), drawn from a Generator so a
// seed fixes them on every rank.
#ifndef PADDLE_NN_LAYERS_H_
#define PADDLE_NN_LAYERS_H_

#include <memory>
#include <string>
#include <vector>

#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/module.h"

namespace paddle::nn {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator* init, bool bias = true);
  absl::StatusOr<Variable> Forward(const Variable& x) override;
  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }

 private:
  Variable weight_, bias_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator* init,
         int64_t stride = 1, int64_t padding = 0, bool bias = true);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  ops::cpu::Conv2dOptions options_;
  Variable weight_, bias_;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  double momentum_, eps_;
  Variable gamma_, beta_, running_mean_, running_var_;
};

// Draws its masks from `generator` (shared with the model; see Generator).
class Dropout : public Module {
 public:
  Dropout(double p, std::shared_ptr<Generator> generator);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  double p_;
  std::shared_ptr<Generator> generator_;
};

class Relu : public Module {
 public:
  Relu() : Module("Relu") {}
  absl::StatusOr<Variable> Forward(const Variable& x) override { return functional::Relu(x); }
};

class Gelu : public Module {
 public:
  Gelu() : Module("Gelu") {}
  absl::StatusOr<Variable> Forward(const Variable& x) override { return functional::Gelu(x); }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0);  // stride 0: = kernel
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  ops::cpu::Pool2dOptions options_;
};

// Averages each channel over the whole image: [N, C, H, W] -> [N, C].
class GlobalAvgPool : public Module {
 public:
  GlobalAvgPool() : Module("GlobalAvgPool") {}
  absl::StatusOr<Variable> Forward(const Variable& x) override;
};

class Flatten : public Module {
 public:
  Flatten() : Module("Flatten") {}
  absl::StatusOr<Variable> Forward(const Variable& x) override { return functional::Flatten(x); }
};

// Children named "0", "1", ... run in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  template <typename M>
  std::shared_ptr<M> Add(std::shared_ptr<M> module) {
    layers_.push_back(module);
    return RegisterModule(std::to_string(layers_.size() - 1), std::move(module));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace paddle::nn

#endif  // PADDLE_NN_LAYERS_H_
