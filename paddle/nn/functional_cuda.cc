// Forward kernels from paddle/ops/cuda, backward closures over what they need; see
// functional_cuda.h. Everything runs asynchronously on ops::cuda::CurrentStream() except the loss,
// whose forward reads its label check back (one synchronization per step).
#include "paddle/nn/functional_cuda.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/activation.h"
#include "paddle/ops/cuda/batch_norm.h"
#include "paddle/ops/cuda/conv2d.h"
#include "paddle/ops/cuda/convert.h"
#include "paddle/ops/cuda/dropout.h"
#include "paddle/ops/cuda/elementwise.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/linear.h"
#include "paddle/ops/cuda/pool2d.h"
#include "paddle/ops/cuda/softmax_cross_entropy.h"

namespace paddle::nn::functional::cuda_impl {
namespace {

using autograd::RecordOperation;
using Grads = absl::StatusOr<std::vector<Tensor>>;
namespace gpu = ops::cuda;

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

absl::StatusOr<Tensor> CastIfDefined(const Tensor& t, DType to) {
  if (!t.defined()) return t;
  return Cast(t, to);
}

}  // namespace

absl::StatusOr<Tensor> Cast(const Tensor& t, DType to) {
  if (t.dtype() == to) return t;
  if (!t.device().is_cuda() || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cast to ", DTypeName(to), ": need a contiguous CUDA tensor, got ", t.ToString()));
  }
  RETURN_IF_ERROR(gpu::UseDevice(t.device()));
  ASSIGN_OR_RETURN(Allocator * allocator, CudaAllocator(t.device().index));
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), to, allocator));
  const auto n = static_cast<size_t>(t.numel());
  const cudaStream_t stream = gpu::CurrentStream();
  const DType from = t.dtype();
  if (from == DType::kFloat32 && to == DType::kBFloat16) {
    RETURN_IF_ERROR(
        CudaFloatToBFloat16(t.data<float>(), static_cast<uint16_t*>(out.data()), n, stream));
  } else if (from == DType::kFloat32 && to == DType::kFloat16) {
    RETURN_IF_ERROR(
        CudaFloatToHalf(t.data<float>(), static_cast<uint16_t*>(out.data()), n, stream));
  } else if (from == DType::kBFloat16 && to == DType::kFloat32) {
    RETURN_IF_ERROR(
        CudaBFloat16ToFloat(static_cast<const uint16_t*>(t.data()), out.data<float>(), n, stream));
  } else if (from == DType::kFloat16 && to == DType::kFloat32) {
    RETURN_IF_ERROR(
        CudaHalfToFloat(static_cast<const uint16_t*>(t.data()), out.data<float>(), n, stream));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("cast of ", t.ToString(), " to ", DTypeName(to),
                                                   ": only float32 <-> bfloat16/float16"));
  }
  return out;
}

absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b,
                                bool autocast_bf16) {
  const bool need_dx = x.requires_grad();
  const bool need_db = b.defined();
  // Note [bf16 autocast]: only fp32 inputs are cast; bf16/fp16 ones run as they are.
  const bool cast =
      autocast_bf16 && x.data().dtype() == DType::kFloat32 && w.data().dtype() == DType::kFloat32;
  if (!cast) {
    ASSIGN_OR_RETURN(Tensor y, gpu::LinearForward(x.data(), w.data(), OrNull(b)));
    return RecordOperation(
        std::move(y), "linear", {x.GradientEdge(), w.GradientEdge(), b.GradientEdge()},
        SavedPair("input x", x, "input w", w),
        [xv = x.data(), wv = w.data(), need_dx, need_db](const Tensor& g) -> Grads {
          ASSIGN_OR_RETURN(gpu::LinearGrads d, gpu::LinearBackward(xv, wv, g, need_dx, need_db));
          return std::vector<Tensor>{d.dx, d.dw, d.db};
        });
  }
  constexpr DType kHalf = DType::kBFloat16;
  ASSIGN_OR_RETURN(Tensor xh, Cast(x.data(), kHalf));
  ASSIGN_OR_RETURN(Tensor wh, Cast(w.data(), kHalf));
  ASSIGN_OR_RETURN(Tensor bh, CastIfDefined(b.defined() ? b.data() : Tensor(), kHalf));
  ASSIGN_OR_RETURN(Tensor yh, gpu::LinearForward(xh, wh, bh.defined() ? &bh : nullptr));
  ASSIGN_OR_RETURN(Tensor y, Cast(yh, DType::kFloat32));
  // Saves private bf16 copies of x and w, which no in-place write can reach: nothing to declare
  // (Note [Saved tensor versions]).
  return RecordOperation(
      std::move(y), "linear_bf16", {x.GradientEdge(), w.GradientEdge(), b.GradientEdge()},
      [xh, wh, need_dx, need_db](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(Tensor gh, Cast(g, kHalf));
        ASSIGN_OR_RETURN(gpu::LinearGrads d, gpu::LinearBackward(xh, wh, gh, need_dx, need_db));
        ASSIGN_OR_RETURN(Tensor dx, CastIfDefined(d.dx, DType::kFloat32));
        ASSIGN_OR_RETURN(Tensor dw, CastIfDefined(d.dw, DType::kFloat32));
        ASSIGN_OR_RETURN(Tensor db, CastIfDefined(d.db, DType::kFloat32));
        return std::vector<Tensor>{dx, dw, db};
      });
}

absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& w, const Variable& b,
                                const ops::cpu::Conv2dOptions& options) {
  ASSIGN_OR_RETURN(Tensor y, gpu::Conv2dForward(x.data(), w.data(), OrNull(b), options));
  const bool need_dx = x.requires_grad();
  const bool need_db = b.defined();
  return RecordOperation(
      std::move(y), "conv2d", {x.GradientEdge(), w.GradientEdge(), b.GradientEdge()},
      SavedPair("input x", x, "input w", w),
      [xv = x.data(), wv = w.data(), options, need_dx, need_db](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(gpu::Conv2dGrads d,
                         gpu::Conv2dBackward(xv, wv, g, options, need_dx, need_db));
        return std::vector<Tensor>{d.dx, d.dw, d.db};
      });
}

absl::StatusOr<Variable> MaxPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options) {
  ASSIGN_OR_RETURN(gpu::MaxPool2dResult r, gpu::MaxPool2dForward(x.data(), options));
  Tensor y = r.y;
  return RecordOperation(std::move(y), "max_pool2d", {x.GradientEdge()}, {{"input x", x.data()}},
                         [xv = x.data(), r = std::move(r), options](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, gpu::MaxPool2dBackward(xv, r, g, options));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> AvgPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options) {
  ASSIGN_OR_RETURN(Tensor y, gpu::AvgPool2dForward(x.data(), options));
  return RecordOperation(std::move(y), "avg_pool2d", {x.GradientEdge()},
                         [xv = x.data(), options](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, gpu::AvgPool2dBackward(xv, g, options));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& gamma, const Variable& beta,
                                   Tensor* running_mean, Tensor* running_var, bool training,
                                   double momentum, double eps) {
  if (!training) {
    ASSIGN_OR_RETURN(Tensor y, gpu::BatchNormForwardEval(x.data(), gamma.data(), beta.data(),
                                                         *running_mean, *running_var, eps));
    return RecordOperation(
        std::move(y), "batch_norm_eval",
        {x.GradientEdge(), gamma.GradientEdge(), beta.GradientEdge()},
        [device = x.data().device()](const Tensor&) -> Grads {
          return absl::UnimplementedError(
              absl::StrCat("the backward of batch norm in evaluation mode on ", device.ToString(),
                           " is not implemented (train mode is; or fine-tune on the CPU)"));
        });
  }
  ASSIGN_OR_RETURN(gpu::BatchNormForwardResult r,
                   gpu::BatchNormForwardTrain(x.data(), gamma.data(), beta.data(), running_mean,
                                              running_var, momentum, eps));
  Tensor y = r.y;
  return RecordOperation(
      std::move(y), "batch_norm", {x.GradientEdge(), gamma.GradientEdge(), beta.GradientEdge()},
      {{"input x", x.data()}, {"input gamma", gamma.data()}},
      [xv = x.data(), gv = gamma.data(), mean = r.save_mean,
       invstd = r.save_invstd](const Tensor& g) -> Grads {
        ASSIGN_OR_RETURN(gpu::BatchNormGrads d, gpu::BatchNormBackward(xv, gv, mean, invstd, g));
        return std::vector<Tensor>{d.dx, d.dgamma, d.dbeta};
      });
}

absl::StatusOr<Variable> Dropout(const Variable& x, double p, uint64_t seed, uint64_t stream,
                                 uint64_t offset) {
  ASSIGN_OR_RETURN(gpu::DropoutResult r, gpu::DropoutForward(x.data(), p, seed, stream, offset));
  return RecordOperation(std::move(r.y), "dropout", {x.GradientEdge()},
                         [mask = r.mask, p](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, gpu::DropoutBackward(mask, g, p));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> Relu(const Variable& x) {
  ASSIGN_OR_RETURN(Tensor y, gpu::ReluForward(x.data()));
  return RecordOperation(y, "relu", {x.GradientEdge()}, {{"output", y}},
                         [y](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, gpu::ReluBackward(y, g));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> Gelu(const Variable& x) {
  ASSIGN_OR_RETURN(Tensor y, gpu::GeluForward(x.data()));
  return RecordOperation(std::move(y), "gelu", {x.GradientEdge()}, {{"input x", x.data()}},
                         [xv = x.data()](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor dx, gpu::GeluBackward(xv, g));
                           return std::vector<Tensor>{dx};
                         });
}

absl::StatusOr<Variable> SoftmaxCrossEntropy(const Variable& logits, const Tensor& labels) {
  ASSIGN_OR_RETURN(gpu::SoftmaxCrossEntropyResult r,
                   gpu::SoftmaxCrossEntropyForward(logits.data(), labels));
  return RecordOperation(
      std::move(r.loss), "softmax_cross_entropy", {logits.GradientEdge()},
      {{"input labels", labels}}, [probs = r.probs, labels](const Tensor& g) -> Grads {
        // The loss gradient is a one-element CUDA tensor (1 from Backward()); the kernel takes
        // it as a host scalar, so it is read back (a 4-byte synchronous copy per step).
        ASSIGN_OR_RETURN(Tensor host, ToDevice(g, Device::Cpu(), gpu::CurrentStream()));
        if (host.dtype() != DType::kFloat32 || host.numel() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "softmax_cross_entropy backward needs a one-element float32 gradient, got ",
              g.ToString()));
        }
        ASSIGN_OR_RETURN(Tensor dx,
                         gpu::SoftmaxCrossEntropyBackward(probs, labels, *host.data<float>()));
        return std::vector<Tensor>{dx};
      });
}

absl::StatusOr<Variable> Add(const Variable& a, const Variable& b) {
  ASSIGN_OR_RETURN(Tensor y, gpu::Add(a.data(), b.data()));
  return RecordOperation(std::move(y), "add", {a.GradientEdge(), b.GradientEdge()},
                         [](const Tensor& g) -> Grads {
                           return std::vector<Tensor>{g, g};
                         });
}

absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b) {
  ASSIGN_OR_RETURN(Tensor y, gpu::Mul(a.data(), b.data()));
  return RecordOperation(std::move(y), "mul", {a.GradientEdge(), b.GradientEdge()},
                         SavedPair("input a", a, "input b", b),
                         [av = a.data(), bv = b.data()](const Tensor& g) -> Grads {
                           ASSIGN_OR_RETURN(Tensor da, gpu::Mul(g, bv));
                           ASSIGN_OR_RETURN(Tensor db, gpu::Mul(g, av));
                           return std::vector<Tensor>{da, db};
                         });
}

}  // namespace paddle::nn::functional::cuda_impl
