// Each operation: run the forward kernel, then record a backward closure over what it needs.
#include "paddle/nn/functional.h"

#include <cmath>
#include <utility>
#include <vector>

#include "paddle/core/status.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/ops/cpu/activation.h"
#include "paddle/ops/cpu/batch_norm.h"
#include "paddle/ops/cpu/dropout.h"
#include "paddle/ops/cpu/elementwise.h"
#include "paddle/ops/cpu/embedding.h"
#include "paddle/ops/cpu/linear.h"
#include "paddle/ops/cpu/softmax_cross_entropy.h"

#if PADDLE_WITH_CUDA
#include "paddle/nn/functional_cuda.h"
#endif

namespace paddle::nn::functional {
namespace {

using autograd::RecordOperation;
using Grads = absl::StatusOr<std::vector<Tensor>>;
namespace cpu = ops::cpu;

using internal::OpDevice;

thread_local bool autocast_bf16 = false;

const Tensor* OrNull(const Variable& v) { return v.defined() ? &v.data() : nullptr; }

// Note [Saved tensor versions]: the backward of a two-input product (mul, linear, conv2d) reads
// a for b's gradient and b for a's, so each is declared only when the other needs a gradient,
// as PyTorch saves them (a step on w before the backward of x * w with x constant is fine).
std::vector<autograd::SavedTensor> SavedPair(const char* what_a, const Variable& a,
                                             const char* what_b, const Variable& b) {
  std::vector<autograd::SavedTensor> saved;
  if (b.requires_grad()) saved.emplace_back(what_a, a.data());
  if (a.requires_grad()) saved.emplace_back(what_b, b.data());
  return saved;
}

// The operations whose CUDA kernels are not wired in yet.
absl::Status NotOnCuda(const char* op, Device device) {
  return absl::UnimplementedError(absl::StrCat(
      op, " on ", device.ToString(),
      ": no CUDA kernel is wired into nn::functional for it yet; run this model on the CPU"));
}

// Runs `cuda` (an expression over the CUDA implementation) when `device` is a CUDA device.
#if PADDLE_WITH_CUDA
#define PADDLE_NN_DISPATCH_CUDA(device, expr) \
  if ((device).is_cuda()) return (expr)
#else
// OpDevice already failed for CUDA tensors in a build without CUDA.
#define PADDLE_NN_DISPATCH_CUDA(device, expr) \
  do {                                        \
  } while (0)
#endif

// y = (x - mean) * gamma / sqrt(var + eps) + beta per channel (dimension 1 of x).
Grads BatchNormEvalBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                            const Tensor& var, double eps, const Tensor& grad) {
  ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  ASSIGN_OR_RETURN(Tensor gc, grad.Contiguous());
  int64_t n = x.shape()[0];
  int64_t channels = x.shape()[1];
  int64_t inner = channels == 0 ? 0 : x.numel() / (n * channels);
  ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(x.shape(), DType::kFloat32));
  ASSIGN_OR_RETURN(Tensor dgamma, Tensor::Zeros({channels}, DType::kFloat32));
  ASSIGN_OR_RETURN(Tensor dbeta, Tensor::Zeros({channels}, DType::kFloat32));
  const float* xp = xc.data<float>();
  const float* gp = gc.data<float>();
  float* dxp = dx.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    double invstd = 1.0 / std::sqrt(double{var.data<float>()[c]} + eps);
    auto scale = static_cast<float>(gamma.data<float>()[c] * invstd);
    float m = mean.data<float>()[c];
    double sum_g = 0, sum_gx = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t base = (i * channels + c) * inner;
      for (int64_t j = 0; j < inner; ++j) {
        float gv = gp[base + j];
        dxp[base + j] = gv * scale;
        sum_g += gv;
        sum_gx += double{gv} * (xp[base + j] - m);
      }
    }
    dgamma.data<float>()[c] = static_cast<float>(sum_gx * invstd);
    dbeta.data<float>()[c] = static_cast<float>(sum_g);
  }
  return std::vector<Tensor>{dx, dgamma, dbeta};
}

}  // namespace

bool AutocastBf16Enabled() { return autocast_bf16; }
void SetAutocastBf16(bool on) { autocast_bf16 = on; }

absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b) {
  ASSIGN_OR_RETURN(Device device,
                   OpDevice("linear", {{"x", &x.data()}, {"w", &w.data()}, {"b", OrNull(b)}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Linear(x, w, b, autocast_bf16));
  ASSIGN_OR_RETURN(Tensor y, cpu::LinearForward(x.data(), w.data(), OrNull(b)));
  bool need_dx = x.requires_grad();
  bool need_db = b.defined();
  return RecordOperation(
      std::move(y), "linear", {x.GradientEdge(), w.GradientEdge(), b.GradientEdge()},
      SavedPair("input x", x, "input w", w),
      [xv = x.data(), wv = w.data(), need_dx, need_db](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(cpu::LinearGrads d, cpu::LinearBackward(xv, wv, g, need_dx, need_db));
        return std::vector<Tensor>{d.dx, d.dw, d.db};
      });
}

absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& w, const Variable& b,
                                const cpu::Conv2dOptions& options) {
  ASSIGN_OR_RETURN(Device device,
                   OpDevice("conv2d", {{"x", &x.data()}, {"w", &w.data()}, {"b", OrNull(b)}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Conv2d(x, w, b, options));
  ASSIGN_OR_RETURN(Tensor y, cpu::Conv2dForward(x.data(), w.data(), OrNull(b), options));
  bool need_dx = x.requires_grad();
  bool need_db = b.defined();
  return RecordOperation(
      std::move(y), "conv2d", {x.GradientEdge(), w.GradientEdge(), b.GradientEdge()},
      SavedPair("input x", x, "input w", w),
      [xv = x.data(), wv = w.data(), options, need_dx, need_db](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(cpu::Conv2dGrads d,
                         cpu::Conv2dBackward(xv, wv, g, options, need_dx, need_db));
        return std::vector<Tensor>{d.dx, d.dw, d.db};
      });
}

absl::StatusOr<Variable> MaxPool2d(const Variable& x, const cpu::Pool2dOptions& options) {
  ASSIGN_OR_RETURN(Device device, OpDevice("max_pool2d", {{"x", &x.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::MaxPool2d(x, options));
  ASSIGN_OR_RETURN(cpu::MaxPool2dResult r, cpu::MaxPool2dForward(x.data(), options));
  Tensor y = r.y;
  return RecordOperation(std::move(y), "max_pool2d", {x.GradientEdge()}, {{"input x", x.data()}},
                         [xv = x.data(), r = std::move(r), options](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, cpu::MaxPool2dBackward(xv, r, g, options));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> AvgPool2d(const Variable& x, const cpu::Pool2dOptions& options) {
  ASSIGN_OR_RETURN(Device device, OpDevice("avg_pool2d", {{"x", &x.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::AvgPool2d(x, options));
  ASSIGN_OR_RETURN(Tensor y, cpu::AvgPool2dForward(x.data(), options));
  return RecordOperation(std::move(y), "avg_pool2d", {x.GradientEdge()},
                         [xv = x.data(), options](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, cpu::AvgPool2dBackward(xv, g, options));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> Relu(const Variable& x) {
  ASSIGN_OR_RETURN(Device device, OpDevice("relu", {{"x", &x.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Relu(x));
  ASSIGN_OR_RETURN(Tensor y, cpu::ReluForward(x.data()));
  return RecordOperation(y, "relu", {x.GradientEdge()}, {{"output", y}},
                         [y](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, cpu::ReluBackward(y, g));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> Gelu(const Variable& x) {
  ASSIGN_OR_RETURN(Device device, OpDevice("gelu", {{"x", &x.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Gelu(x));
  ASSIGN_OR_RETURN(Tensor y, cpu::GeluForward(x.data()));
  return RecordOperation(std::move(y), "gelu", {x.GradientEdge()}, {{"input x", x.data()}},
                         [xv = x.data()](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, cpu::GeluBackward(xv, g));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& gamma, const Variable& beta,
                                   Tensor* running_mean, Tensor* running_var, bool training,
                                   double momentum, double eps) {
  ASSIGN_OR_RETURN(Device device, OpDevice("batch_norm", {{"x", &x.data()},
                                                          {"gamma", &gamma.data()},
                                                          {"beta", &beta.data()},
                                                          {"running_mean", running_mean},
                                                          {"running_var", running_var}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::BatchNorm(x, gamma, beta, running_mean, running_var,
                                                       training, momentum, eps));
  if (!training) {
    ASSIGN_OR_RETURN(Tensor y, cpu::BatchNormForwardEval(x.data(), gamma.data(), beta.data(),
                                                         *running_mean, *running_var, eps));
    // With frozen statistics the layer is a per-channel affine map (fine-tuning in eval mode
    // still trains the layers below it and gamma, beta).
    return RecordOperation(
        std::move(y), "batch_norm_eval",
        {x.GradientEdge(), gamma.GradientEdge(), beta.GradientEdge()},
        {{"input x", x.data()},
         {"input gamma", gamma.data()},
         {"running_mean", *running_mean},
         {"running_var", *running_var}},
        [xv = x.data(), gv = gamma.data(), mean = *running_mean, var = *running_var, eps](
            const Tensor& g) -> Grads { return BatchNormEvalBackward(xv, gv, mean, var, eps, g); });
  }
  ASSIGN_OR_RETURN(cpu::BatchNormForwardResult r,
                   cpu::BatchNormForwardTrain(x.data(), gamma.data(), beta.data(), running_mean,
                                              running_var, momentum, eps));
  Tensor y = r.y;
  return RecordOperation(
      std::move(y), "batch_norm", {x.GradientEdge(), gamma.GradientEdge(), beta.GradientEdge()},
      {{"input x", x.data()}, {"input gamma", gamma.data()}},
      [xv = x.data(), gv = gamma.data(), mean = r.save_mean,
       invstd = r.save_invstd](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(cpu::BatchNormGrads d, cpu::BatchNormBackward(xv, gv, mean, invstd, g));
        return std::vector<Tensor>{d.dx, d.dgamma, d.dbeta};
      });
}

absl::StatusOr<Variable> Dropout(const Variable& x, double p, uint64_t seed, uint64_t stream,
                                 uint64_t offset) {
  if (p == 0) return x;
  ASSIGN_OR_RETURN(Device device, OpDevice("dropout", {{"x", &x.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Dropout(x, p, seed, stream, offset));
  ASSIGN_OR_RETURN(cpu::DropoutResult r, cpu::DropoutForward(x.data(), p, seed, stream, offset));
  return RecordOperation(std::move(r.y), "dropout", {x.GradientEdge()},
                         [mask = r.mask, p](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, cpu::DropoutBackward(mask, g, p));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> SoftmaxCrossEntropy(const Variable& logits, const Tensor& labels) {
  ASSIGN_OR_RETURN(Device device, OpDevice("softmax_cross_entropy",
                                           {{"logits", &logits.data()}, {"labels", &labels}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::SoftmaxCrossEntropy(logits, labels));
  ASSIGN_OR_RETURN(cpu::SoftmaxCrossEntropyResult r,
                   cpu::SoftmaxCrossEntropyForward(logits.data(), labels));
  return RecordOperation(
      std::move(r.loss), "softmax_cross_entropy", {logits.GradientEdge()},
      {{"input labels", labels}}, [probs = r.probs, labels](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(Tensor dx,
                         cpu::SoftmaxCrossEntropyBackward(probs, labels, *g.data<float>()));
        return std::vector<Tensor>{dx};
      });
}

absl::StatusOr<Variable> Reshape(const Variable& x, absl::Span<const int64_t> shape) {
  ASSIGN_OR_RETURN(Tensor contiguous, x.data().Contiguous());
  ASSIGN_OR_RETURN(Tensor y, contiguous.View(shape));
  return RecordOperation(std::move(y), "reshape", {x.GradientEdge()},
                         [in_shape = x.shape()](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor gc, g.Contiguous());
                           ASSIGN_OR_RETURN(Tensor dx, gc.View(in_shape));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> Flatten(const Variable& x) {
  if (x.data().dim() < 1) {
    return absl::InvalidArgumentError("flatten needs a batch dimension, got a scalar");
  }
  int64_t n = x.shape()[0];
  return Reshape(x, {n, n == 0 ? 0 : -1});
}

absl::StatusOr<Variable> Add(const Variable& a, const Variable& b) {
  ASSIGN_OR_RETURN(Device device, OpDevice("add", {{"a", &a.data()}, {"b", &b.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Add(a, b));
  ASSIGN_OR_RETURN(Tensor y, cpu::Add(a.data(), b.data()));
  return RecordOperation(std::move(y), "add", {a.GradientEdge(), b.GradientEdge()},
                         [](const Tensor& g) -> Grads {
                           return std::vector<Tensor>{g, g};
                         });
}

absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b) {
  ASSIGN_OR_RETURN(Device device, OpDevice("mul", {{"a", &a.data()}, {"b", &b.data()}}));
  PADDLE_NN_DISPATCH_CUDA(device, cuda_impl::Mul(a, b));
  ASSIGN_OR_RETURN(Tensor y, cpu::Mul(a.data(), b.data()));
  return RecordOperation(std::move(y), "mul", {a.GradientEdge(), b.GradientEdge()},
                         SavedPair("input a", a, "input b", b),
                         [av = a.data(), bv = b.data()](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor da, cpu::Mul(g, bv));
                           ASSIGN_OR_RETURN(Tensor db, cpu::Mul(g, av));
                           return std::vector<Tensor>{da, db};
                         });
}

absl::StatusOr<Variable> Embedding(const Variable& weight, const Tensor& indices) {
  ASSIGN_OR_RETURN(Device device,
                   OpDevice("embedding", {{"weight", &weight.data()}, {"indices", &indices}}));
  if (device.is_cuda()) return NotOnCuda("embedding", device);
  ASSIGN_OR_RETURN(Tensor y, cpu::EmbeddingForward(weight.data(), indices));
  return RecordOperation(std::move(y), "embedding", {weight.GradientEdge()},
                         {{"input indices", indices}},
                         [indices, rows = weight.shape()[0]](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dw, cpu::EmbeddingBackward(indices, g, rows));
                           return std::vector<Tensor>{dw};
                         });
}

}  // namespace paddle::nn::functional
