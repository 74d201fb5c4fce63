// SGD update: one fused pass over (w, g, momentum buffer) per parameter.
#include "paddle/optim/sgd.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

#if PADDLE_WITH_CUDA
#include "paddle/ops/cuda/sgd.h"
#endif

namespace paddle::optim {
namespace {

std::vector<std::string> SlotNames(const SgdOptions& o) {
  if (o.momentum == 0.0) return {};
  return {"momentum"};
}

// The branches are template parameters so that each variant is a plain loop the compiler
// vectorizes.
template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
void SgdKernel(T* w, const T* g, T* buf, int64_t n, T lr, T wd, T momentum, T one_minus_damp) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i] + wd * w[i];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : momentum * buf[i] + one_minus_damp * d;
      buf[i] = b;
      d = kNesterov ? d + momentum * b : b;
    }
    w[i] -= lr * d;
  }
}

template <typename T>
void SgdUpdate(const SgdOptions& o, double lr, bool first, bool excluded, T* w, const T* g, T* buf,
               int64_t n) {
  const T a = static_cast<T>(lr);
  const T wd = excluded ? T(0) : static_cast<T>(o.weight_decay);
  const T m = static_cast<T>(o.momentum);
  const T omd = static_cast<T>(1.0 - o.dampening);
  if (o.momentum == 0.0) return SgdKernel<T, false, false, false>(w, g, buf, n, a, wd, m, omd);
  if (o.nesterov) {
    if (first) return SgdKernel<T, true, true, true>(w, g, buf, n, a, wd, m, omd);
    return SgdKernel<T, true, false, true>(w, g, buf, n, a, wd, m, omd);
  }
  if (first) return SgdKernel<T, true, true, false>(w, g, buf, n, a, wd, m, omd);
  return SgdKernel<T, true, false, false>(w, g, buf, n, a, wd, m, omd);
}

}  // namespace

Sgd::Sgd(std::vector<autograd::Variable> params, SgdOptions options)
    : Optimizer(std::move(params), options.lr, options.exclude, SlotNames(options)),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::Create(std::vector<autograd::Variable> params,
                                                 SgdOptions options) {
  if (!(options.momentum >= 0.0) || !(options.weight_decay >= 0.0) ||
      !(options.dampening >= 0.0 && options.dampening <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SGD: need momentum >= 0, weight_decay >= 0 and 0 <= dampening <= 1; got momentum ",
        options.momentum, ", weight_decay ", options.weight_decay, ", dampening ",
        options.dampening));
  }
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SGD: Nesterov momentum needs momentum > 0 and dampening 0; got momentum ",
                     options.momentum, ", dampening ", options.dampening));
  }
  std::unique_ptr<Sgd> sgd(new Sgd(std::move(params), std::move(options)));
  RETURN_IF_ERROR(Annotate(sgd->Init(), "SGD"));
  return sgd;
}

void Sgd::Update(const ParamUpdate& p) {
  const bool first = p.step == 1;
  const int64_t n = p.value.numel();
  if (p.value.dtype() == DType::kFloat32) {
    float* buf = p.slots->empty() ? nullptr : (*p.slots)[0].data<float>();
    SgdUpdate<float>(options_, lr(), first, p.excluded, p.value.data<float>(), p.grad.data<float>(),
                     buf, n);
  } else {
    double* buf = p.slots->empty() ? nullptr : (*p.slots)[0].data<double>();
    SgdUpdate<double>(options_, lr(), first, p.excluded, p.value.data<double>(),
                      p.grad.data<double>(), buf, n);
  }
}

absl::Status Sgd::UpdateCuda(const ParamUpdate& p) {
#if PADDLE_WITH_CUDA
  ops::cuda::kernels::SgdParams k;
  k.lr = static_cast<float>(lr());
  k.momentum = static_cast<float>(options_.momentum);
  k.dampening = static_cast<float>(options_.dampening);
  k.weight_decay = p.excluded ? 0.0f : static_cast<float>(options_.weight_decay);
  k.nesterov = options_.nesterov;
  k.first = p.step == 1;
  Tensor value = p.value;
  Tensor* buf = p.slots->empty() ? nullptr : &(*p.slots)[0];
  return ops::cuda::SgdUpdate(&value, p.grad, buf, k);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("SGD update of ", p.value.ToString(), ": built without CUDA"));
#endif
}

}  // namespace paddle::optim
