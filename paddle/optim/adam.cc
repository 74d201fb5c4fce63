// Adam/AdamW update: one fused pass over (w, g, m, v) per parameter.
#include "paddle/optim/adam.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::optim {
namespace {

struct AdamScalars {
  double decay_factor;  // AdamW: 1 - lr * wd
  double l2;            // Adam: wd
  double beta1;
  double beta2;
  double step_size;     // lr / (1 - beta1^t)
  double inv_bc2_sqrt;  // 1 / sqrt(1 - beta2^t)
  double eps;
};

template <typename T>
void AdamKernel(const AdamScalars& s, T* w, const T* g, T* m, T* v, int64_t n) {
  const T decay = static_cast<T>(s.decay_factor);
  const T l2 = static_cast<T>(s.l2);
  const T b1 = static_cast<T>(s.beta1);
  const T c1 = static_cast<T>(1.0 - s.beta1);
  const T b2 = static_cast<T>(s.beta2);
  const T c2 = static_cast<T>(1.0 - s.beta2);
  const T step = static_cast<T>(s.step_size);
  const T inv_bc2 = static_cast<T>(s.inv_bc2_sqrt);
  const T eps = static_cast<T>(s.eps);
  for (int64_t i = 0; i < n; ++i) {
    const T wi = w[i] * decay;
    const T gi = g[i] + l2 * wi;
    const T mi = b1 * m[i] + c1 * gi;
    const T vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - step * mi / (std::sqrt(vi) * inv_bc2 + eps);
  }
}

}  // namespace

AdamOptions AdamWOptions() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  o.decoupled_weight_decay = true;
  return o;
}

Adam::Adam(std::vector<autograd::Variable> params, AdamOptions options)
    : Optimizer(std::move(params), options.lr, options.exclude, {"exp_avg", "exp_avg_sq"}),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Adam>> Adam::Create(std::vector<autograd::Variable> params,
                                                   AdamOptions options) {
  const char* name = options.decoupled_weight_decay ? "AdamW" : "Adam";
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": betas must be in [0, 1); got (",
                                                   options.beta1, ", ", options.beta2, ")"));
  }
  if (!(options.eps >= 0.0) || !(options.weight_decay >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need eps >= 0 and weight_decay >= 0; got eps ", options.eps,
                     ", weight_decay ", options.weight_decay));
  }
  std::unique_ptr<Adam> adam(new Adam(std::move(params), std::move(options)));
  RETURN_IF_ERROR(Annotate(adam->Init(), name));
  return adam;
}

void Adam::Update(const ParamUpdate& p) {
  const double t = static_cast<double>(p.step);
  const double wd = p.excluded ? 0.0 : options_.weight_decay;
  AdamScalars s;
  s.decay_factor = options_.decoupled_weight_decay ? 1.0 - lr() * wd : 1.0;
  s.l2 = options_.decoupled_weight_decay ? 0.0 : wd;
  s.beta1 = options_.beta1;
  s.beta2 = options_.beta2;
  s.step_size = lr() / (1.0 - std::pow(options_.beta1, t));
  s.inv_bc2_sqrt = 1.0 / std::sqrt(1.0 - std::pow(options_.beta2, t));
  s.eps = options_.eps;
  std::vector<Tensor>& st = *p.slots;
  if (p.value.dtype() == DType::kFloat32) {
    AdamKernel<float>(s, p.value.data<float>(), p.grad.data<float>(), st[0].data<float>(),
                      st[1].data<float>(), p.value.numel());
  } else {
    AdamKernel<double>(s, p.value.data<double>(), p.grad.data<double>(), st[0].data<double>(),
                       st[1].data<double>(), p.value.numel());
  }
}

}  // namespace paddle::optim
