// Adagrad (Duchi et al. 2011) with PyTorch's semantics (torch.optim.Adagrad). Per element, at the
// parameter's t-th update:
//
//   g += wd * w                          (wd is 0 for excluded parameters)
//   sum += g * g
//   w -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)
//
// State slot "sum", starting at initial_accumulator_value. A zero gradient leaves w and sum as
// they are, so the lazy sparse update (Note [Lazy sparse updates] in optimizer.h) equals the dense
// one whatever rows are touched (without weight decay).
#ifndef PADDLE_OPTIM_ADAGRAD_H_
#define PADDLE_OPTIM_ADAGRAD_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/optim/optimizer.h"

namespace paddle::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  ExcludePredicate exclude;  // null: ExcludeBelow2D
};

class Adagrad final : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Adagrad>> Create(std::vector<autograd::Variable> params,
                                                         AdagradOptions options);
  const AdagradOptions& options() const { return options_; }

 private:
  Adagrad(std::vector<autograd::Variable> params, AdagradOptions options);
  void Update(const ParamUpdate& p) override;
  bool SupportsSparse() const override { return true; }  // Note [Lazy sparse updates]

  AdagradOptions options_;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_ADAGRAD_H_
