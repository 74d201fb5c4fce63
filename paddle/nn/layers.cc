// Layer construction (shapes and initialisation) and forward passes.
#include "paddle/nn/layers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::nn {
namespace {

Tensor UniformTensor(const Shape& shape, float bound, Generator* init) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  init->Uniform(&t, -bound, bound);
  return t;
}

Tensor Filled(int64_t n, float value) {
  Tensor t = Tensor::Empty({n}, DType::kFloat32).value();
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value;
  return t;
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, Generator* init, bool bias) : Module("Linear") {
  float bound = 1.0f / std::sqrt(static_cast<float>(in));
  weight_ = RegisterParameter("weight", UniformTensor({out, in}, bound, init));
  if (bias) bias_ = RegisterParameter("bias", UniformTensor({out}, bound, init));
}

absl::StatusOr<Variable> Linear::Forward(const Variable& x) {
  return functional::Linear(x, weight_, bias_);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator* init,
               int64_t stride, int64_t padding, bool bias)
    : Module("Conv2d") {
  options_.stride_h = options_.stride_w = stride;
  options_.pad_h = options_.pad_w = padding;
  float bound = 1.0f / std::sqrt(static_cast<float>(in_channels * kernel * kernel));
  weight_ = RegisterParameter(
      "weight", UniformTensor({out_channels, in_channels, kernel, kernel}, bound, init));
  if (bias) bias_ = RegisterParameter("bias", UniformTensor({out_channels}, bound, init));
}

absl::StatusOr<Variable> Conv2d::Forward(const Variable& x) {
  return functional::Conv2d(x, weight_, bias_, options_);
}

BatchNorm2d::BatchNorm2d(int64_t channels, double momentum, double eps)
    : Module("BatchNorm2d"), momentum_(momentum), eps_(eps) {
  gamma_ = RegisterParameter("weight", Filled(channels, 1));
  beta_ = RegisterParameter("bias", Filled(channels, 0));
  running_mean_ = RegisterBuffer("running_mean", Filled(channels, 0));
  running_var_ = RegisterBuffer("running_var", Filled(channels, 1));
}

absl::StatusOr<Variable> BatchNorm2d::Forward(const Variable& x) {
  Tensor mean = running_mean_.data();
  Tensor var = running_var_.data();
  return functional::BatchNorm(x, gamma_, beta_, &mean, &var, training(), momentum_, eps_);
}

Dropout::Dropout(double p, std::shared_ptr<Generator> generator)
    : Module("Dropout"), p_(p), generator_(std::move(generator)) {}

absl::StatusOr<Variable> Dropout::Forward(const Variable& x) {
  if (!training() || p_ == 0) return x;
  uint64_t offset = generator_->Reserve(static_cast<uint64_t>(x.data().numel()));
  return functional::Dropout(x, p_, generator_->seed(), generator_->stream(), offset);
}

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride) : Module("MaxPool2d") {
  options_.kernel_h = options_.kernel_w = kernel;
  options_.stride_h = options_.stride_w = stride == 0 ? kernel : stride;
}

absl::StatusOr<Variable> MaxPool2d::Forward(const Variable& x) {
  return functional::MaxPool2d(x, options_);
}

absl::StatusOr<Variable> GlobalAvgPool::Forward(const Variable& x) {
  if (x.data().dim() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("GlobalAvgPool needs [N, C, H, W], got ", x.data().ToString()));
  }
  ops::cpu::Pool2dOptions o;
  o.kernel_h = o.stride_h = x.shape()[2];
  o.kernel_w = o.stride_w = x.shape()[3];
  ASSIGN_OR_RETURN(Variable pooled, functional::AvgPool2d(x, o));
  return functional::Flatten(pooled);
}

absl::StatusOr<Variable> Sequential::Forward(const Variable& x) {
  Variable h = x;
  for (const auto& layer : layers_) {
    ASSIGN_OR_RETURN(h, layer->Forward(h));
  }
  return h;
}

}  // namespace paddle::nn
