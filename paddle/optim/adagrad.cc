// Adagrad: the per-element update and option checks.
#include "paddle/optim/adagrad.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::optim {
namespace {

template <typename T>
void AdagradKernel(T* w, const T* g, T* sum, int64_t n, T clr, T wd, T eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i] + wd * w[i];
    const T si = sum[i] + gi * gi;
    sum[i] = si;
    w[i] -= clr * gi / (std::sqrt(si) + eps);
  }
}

template <typename T>
void Fill(const Tensor& t, double value) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value);
}

}  // namespace

Adagrad::Adagrad(std::vector<autograd::Variable> params, AdagradOptions options)
    : Optimizer(std::move(params), options.lr, options.exclude, {"sum"}),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Adagrad>> Adagrad::Create(std::vector<autograd::Variable> params,
                                                         AdagradOptions options) {
  if (!(options.lr_decay >= 0.0) || !(options.weight_decay >= 0.0) ||
      !(options.initial_accumulator_value >= 0.0) || !(options.eps >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adagrad: need lr_decay, weight_decay, initial_accumulator_value and eps >= 0; got "
        "lr_decay ",
        options.lr_decay, ", weight_decay ", options.weight_decay, ", initial_accumulator_value ",
        options.initial_accumulator_value, ", eps ", options.eps));
  }
  std::unique_ptr<Adagrad> adagrad(new Adagrad(std::move(params), std::move(options)));
  RETURN_IF_ERROR(Annotate(adagrad->Init(), "Adagrad"));
  for (int64_t i = 0; i < adagrad->num_params(); ++i) {
    const Tensor& sum = adagrad->state(i, 0);
    if (!sum.device().is_cpu()) continue;  // Init rejected CUDA parameters already
    if (sum.dtype() == DType::kFloat32) {
      Fill<float>(sum, adagrad->options_.initial_accumulator_value);
    } else {
      Fill<double>(sum, adagrad->options_.initial_accumulator_value);
    }
  }
  return adagrad;
}

void Adagrad::Update(const ParamUpdate& p) {
  const double clr = lr() / (1.0 + static_cast<double>(p.step - 1) * options_.lr_decay);
  const double wd = p.excluded ? 0.0 : options_.weight_decay;
  Tensor& sum = (*p.slots)[0];
  if (p.value.dtype() == DType::kFloat32) {
    AdagradKernel<float>(p.value.data<float>(), p.grad.data<float>(), sum.data<float>(),
                         p.value.numel(), static_cast<float>(clr), static_cast<float>(wd),
                         static_cast<float>(options_.eps));
  } else {
    AdagradKernel<double>(p.value.data<double>(), p.grad.data<double>(), sum.data<double>(),
                          p.value.numel(), clr, wd, options_.eps);
  }
}

}  // namespace paddle::optim
