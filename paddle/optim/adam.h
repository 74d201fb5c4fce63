// Adam (Kingma and Ba 2015) and AdamW (Loshchilov and Hutter 2019), with PyTorch's semantics
// (torch.optim.Adam / AdamW, amsgrad off). Per element, at the parameter's t-th update:
//
//   Adam:  g += wd * w                    AdamW: w *= 1 - lr * wd
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// wd is 0 for excluded parameters (Note [Excluded parameters]). State slots "exp_avg" (m) and
// "exp_avg_sq" (v). t counts the parameter's own updates, so bias correction stays right for a
// parameter that sometimes has no gradient.
#ifndef PADDLE_OPTIM_ADAM_H_
#define PADDLE_OPTIM_ADAM_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/optim/optimizer.h"

namespace paddle::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
  ExcludePredicate exclude;             // null: ExcludeBelow2D
};

// AdamW's defaults in PyTorch: decoupled weight decay 0.01.
AdamOptions AdamWOptions();

class Adam final : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Adam>> Create(std::vector<autograd::Variable> params,
                                                      AdamOptions options);
  const AdamOptions& options() const { return options_; }

 private:
  Adam(std::vector<autograd::Variable> params, AdamOptions options);
  void Update(const ParamUpdate& p) override;
  bool SupportsSparse() const override { return true; }  // Note [Lazy sparse updates]

  AdamOptions options_;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_ADAM_H_
