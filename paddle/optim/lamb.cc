// LAMB update: two passes per parameter, see Note [LAMB passes].
#include "paddle/optim/lamb.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/optim/norm.h"

namespace paddle::optim {
namespace {

template <typename T>
struct LambScalars {
  T b1, c1, b2, c2;  // beta and 1 - beta
  T inv_bc1;         // 1 / (1 - beta1^t)
  T inv_bc2;         // 1 / (1 - beta2^t)
  T eps;
  T wd;

  // The direction u for one element, from the already updated moments.
  T Direction(T m, T v, T w) const {
    return (m * inv_bc1) / (std::sqrt(v * inv_bc2) + eps) + wd * w;
  }
};

// Pass 1: moments, and sums = {||u||^2, ||w||^2} in fixed-order lanes
// (Note [Deterministic vectorized norms]).
template <typename T>
void LambSums(const LambScalars<T>& s, const T* w, const T* g, T* m, T* v, int64_t n,
              double* sums) {
  LaneSums u2;
  LaneSums w2;
  int64_t i = 0;
  auto element = [&](int64_t k, int lane) {
    const T gk = g[k];
    const T mk = s.b1 * m[k] + s.c1 * gk;
    const T vk = s.b2 * v[k] + s.c2 * gk * gk;
    m[k] = mk;
    v[k] = vk;
    const double u = s.Direction(mk, vk, w[k]);
    const double wk = w[k];
    u2.lane[lane] += u * u;
    w2.lane[lane] += wk * wk;
  };
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) element(i + j, j);
  }
  for (int j = 0; i < n; ++i, ++j) element(i, j);
  sums[0] = u2.Total();
  sums[1] = w2.Total();
}

// Pass 2: the update, from the totals.
template <typename T>
void LambApply(const LambScalars<T>& s, double lr, bool excluded, const double* sums, T* w,
               const T* m, const T* v, int64_t n) {
  double trust = 1.0;
  if (!excluded) {
    const double un = std::sqrt(sums[0]);
    const double wn = std::sqrt(sums[1]);
    if (un > 0.0 && wn > 0.0) trust = wn / un;
  }
  const T step = static_cast<T>(lr * trust);
  for (int64_t k = 0; k < n; ++k) w[k] -= step * s.Direction(m[k], v[k], w[k]);
}

template <typename T>
LambScalars<T> MakeScalars(const LambOptions& o, int64_t step, bool excluded) {
  const double t = static_cast<double>(step);
  LambScalars<T> s;
  s.b1 = static_cast<T>(o.beta1);
  s.c1 = static_cast<T>(1.0 - o.beta1);
  s.b2 = static_cast<T>(o.beta2);
  s.c2 = static_cast<T>(1.0 - o.beta2);
  s.inv_bc1 = static_cast<T>(1.0 / (1.0 - std::pow(o.beta1, t)));
  s.inv_bc2 = static_cast<T>(1.0 / (1.0 - std::pow(o.beta2, t)));
  s.eps = static_cast<T>(o.eps);
  s.wd = excluded ? T(0) : static_cast<T>(o.weight_decay);
  return s;
}

}  // namespace

Lamb::Lamb(std::vector<autograd::Variable> params, LambOptions options)
    : Optimizer(std::move(params), options.lr, options.exclude, {"exp_avg", "exp_avg_sq"}),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Lamb>> Lamb::Create(std::vector<autograd::Variable> params,
                                                   LambOptions options) {
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("LAMB: betas must be in [0, 1); got (",
                                                   options.beta1, ", ", options.beta2, ")"));
  }
  if (!(options.eps >= 0.0) || !(options.weight_decay >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LAMB: need eps >= 0 and weight_decay >= 0; got eps ", options.eps,
                     ", weight_decay ", options.weight_decay));
  }
  std::unique_ptr<Lamb> lamb(new Lamb(std::move(params), std::move(options)));
  RETURN_IF_ERROR(Annotate(lamb->Init(), "LAMB"));
  return lamb;
}

void Lamb::Update(const ParamUpdate& p) {
  double sums[2];
  NormSums(p, sums);
  ApplyNorms(p, sums);
}

void Lamb::NormSums(const ParamUpdate& p, double* sums) {
  std::vector<Tensor>& st = *p.slots;
  if (p.value.dtype() == DType::kFloat32) {
    LambSums<float>(MakeScalars<float>(options_, p.step, p.excluded), p.value.data<float>(),
                    p.grad.data<float>(), st[0].data<float>(), st[1].data<float>(), p.value.numel(),
                    sums);
  } else {
    LambSums<double>(MakeScalars<double>(options_, p.step, p.excluded), p.value.data<double>(),
                     p.grad.data<double>(), st[0].data<double>(), st[1].data<double>(),
                     p.value.numel(), sums);
  }
}

void Lamb::ApplyNorms(const ParamUpdate& p, const double* sums) {
  std::vector<Tensor>& st = *p.slots;
  if (p.value.dtype() == DType::kFloat32) {
    LambApply<float>(MakeScalars<float>(options_, p.step, p.excluded), lr(), p.excluded, sums,
                     p.value.data<float>(), st[0].data<float>(), st[1].data<float>(),
                     p.value.numel());
  } else {
    LambApply<double>(MakeScalars<double>(options_, p.step, p.excluded), lr(), p.excluded, sums,
                      p.value.data<double>(), st[0].data<double>(), st[1].data<double>(),
                      p.value.numel());
  }
}

}  // namespace paddle::optim
