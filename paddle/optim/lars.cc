// LARS update: a norm pass over (w, g), then one fused pass over (w, g, v) per parameter.
#include "paddle/optim/lars.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/optim/norm.h"

namespace paddle::optim {
namespace {

// sums = {||w||^2, ||g||^2}; zeros for excluded parameters, which need no trust ratio.
template <typename T>
void LarsSums(bool excluded, const T* w, const T* g, int64_t n, double* sums) {
  sums[0] = 0.0;
  sums[1] = 0.0;
  if (!excluded) SumSquares2(w, g, n, &sums[0], &sums[1]);
}

template <typename T>
void LarsApply(double lr, const LarsOptions& o, bool excluded, const double* sums, T* w, const T* g,
               T* v, int64_t n) {
  double trust = 1.0;
  const double wd = excluded ? 0.0 : o.weight_decay;
  if (!excluded) {
    const double wn = std::sqrt(sums[0]);
    const double gn = std::sqrt(sums[1]);
    if (wn > 0.0 && gn > 0.0) trust = o.eta * wn / (gn + wd * wn);
  }
  const T scaled_lr = static_cast<T>(lr * trust);
  const T m = static_cast<T>(o.momentum);
  const T decay = static_cast<T>(wd);
  for (int64_t i = 0; i < n; ++i) {
    const T vi = m * v[i] + scaled_lr * (g[i] + decay * w[i]);
    v[i] = vi;
    w[i] -= vi;
  }
}

}  // namespace

Lars::Lars(std::vector<autograd::Variable> params, LarsOptions options)
    : Optimizer(std::move(params), options.lr, options.exclude, {"momentum"}),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Lars>> Lars::Create(std::vector<autograd::Variable> params,
                                                   LarsOptions options) {
  if (!(options.momentum >= 0.0) || !(options.weight_decay >= 0.0) || !(options.eta > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LARS: need momentum >= 0, weight_decay >= 0 and eta > 0; got momentum ", options.momentum,
        ", weight_decay ", options.weight_decay, ", eta ", options.eta));
  }
  std::unique_ptr<Lars> lars(new Lars(std::move(params), std::move(options)));
  RETURN_IF_ERROR(Annotate(lars->Init(), "LARS"));
  return lars;
}

void Lars::Update(const ParamUpdate& p) {
  double sums[2];
  NormSums(p, sums);
  ApplyNorms(p, sums);
}

void Lars::NormSums(const ParamUpdate& p, double* sums) {
  if (p.value.dtype() == DType::kFloat32) {
    LarsSums<float>(p.excluded, p.value.data<float>(), p.grad.data<float>(), p.value.numel(), sums);
  } else {
    LarsSums<double>(p.excluded, p.value.data<double>(), p.grad.data<double>(), p.value.numel(),
                     sums);
  }
}

void Lars::ApplyNorms(const ParamUpdate& p, const double* sums) {
  Tensor& v = (*p.slots)[0];
  if (p.value.dtype() == DType::kFloat32) {
    LarsApply<float>(lr(), options_, p.excluded, sums, p.value.data<float>(), p.grad.data<float>(),
                     v.data<float>(), p.value.numel());
  } else {
    LarsApply<double>(lr(), options_, p.excluded, sums, p.value.data<double>(),
                      p.grad.data<double>(), v.data<double>(), p.value.numel());
  }
}

}  // namespace paddle::optim
