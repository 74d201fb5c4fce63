// Differentiable operations (namespace nn::functional, as torch.nn.functional): the CPU kernels of
// paddle/ops/cpu wrapped so that the forward pass records the graph the backward pass runs
// (paddle/core/autograd). Layers (layers.h) and models (models.h) are built from these; user code
// may call them directly.
//
// Each function computes its output now and, when some input requires a gradient and grad mode
// is on, records a node holding what its backward needs (inputs, pooling workspace, batch
// statistics, dropout mask). Errors from a kernel (wrong shapes, bad labels) come back as a
// Status naming the operation; nothing is recorded then.
//
// Devices: each operation runs the paddle/ops/cpu kernel when its tensors are on the CPU and the
// paddle/ops/cuda one when they are all on one CUDA device (device_dispatch.h); tensors on
// different devices are kInvalidArgument naming the operation, the tensors and their devices.
// On CUDA every operation runs except Embedding (kUnimplemented naming the device) and the
// backward of BatchNorm in evaluation mode.
#ifndef PADDLE_NN_FUNCTIONAL_H_
#define PADDLE_NN_FUNCTIONAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/ops/cpu/conv2d.h"
#include "paddle/ops/cpu/pool2d.h"

namespace paddle::nn::functional {

using autograd::Variable;

// Note [bf16 autocast] (functional_cuda.h): while on, Linear on CUDA float32 tensors computes its
// GEMMs in bf16 with fp32 accumulation and returns fp32 values and gradients. Per thread, off by
// default, like GradMode.
bool AutocastBf16Enabled();
void SetAutocastBf16(bool on);
class AutocastBf16Guard {
 public:
  explicit AutocastBf16Guard(bool on = true) : previous_(AutocastBf16Enabled()) {
    SetAutocastBf16(on);
  }
  ~AutocastBf16Guard() { SetAutocastBf16(previous_); }
  AutocastBf16Guard(const AutocastBf16Guard&) = delete;
  AutocastBf16Guard& operator=(const AutocastBf16Guard&) = delete;

 private:
  bool previous_;
};

// x [N, in], w [out, in], b [out] (undefined for none).
absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b);
// x [N, C, H, W], w [K, C, R, S], b [K] (undefined for none).
absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& w, const Variable& b,
                                const ops::cpu::Conv2dOptions& options);
absl::StatusOr<Variable> MaxPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options);
absl::StatusOr<Variable> AvgPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options);
absl::StatusOr<Variable> Relu(const Variable& x);
absl::StatusOr<Variable> Gelu(const Variable& x);
// Training mode normalises with the batch statistics and updates the running ones in place
// (`running_mean`, `running_var` are buffers); evaluation mode uses the running statistics
// (and its backward treats them as constants).
absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& gamma, const Variable& beta,
                                   Tensor* running_mean, Tensor* running_var, bool training,
                                   double momentum, double eps);
// Zeroes each element with probability p and scales the rest by 1/(1-p). The mask is word
// `offset` onwards of the Philox stream (seed, stream): callers advance `offset` by x's element
// count per call (Generator does) so masks never repeat.
absl::StatusOr<Variable> Dropout(const Variable& x, double p, uint64_t seed, uint64_t stream,
                                 uint64_t offset);
// Mean over the batch of -log softmax(logits)[label]; labels int64 [N].
absl::StatusOr<Variable> SoftmaxCrossEntropy(const Variable& logits, const Tensor& labels);
// Same elements, new shape (one entry may be -1).
absl::StatusOr<Variable> Reshape(const Variable& x, absl::Span<const int64_t> shape);
// [N, ...] -> [N, prod(...)].
absl::StatusOr<Variable> Flatten(const Variable& x);
absl::StatusOr<Variable> Add(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b);
// weight [V, D], indices int64 of any shape -> [..., D].
absl::StatusOr<Variable> Embedding(const Variable& weight, const Tensor& indices);

}  // namespace paddle::nn::functional

#endif  // PADDLE_NN_FUNCTIONAL_H_
