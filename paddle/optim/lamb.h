// LAMB: layer-wise adaptive moments (You et al. 2019, "Large batch optimization for deep
// learning: training BERT in 76 minutes"). Adam's moments with bias correction give a direction,
// which is rescaled per parameter by a trust ratio. At the parameter's t-th update:
//
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * w
//   trust = ||w|| / ||u||     (1 when either norm is 0 or the parameter is excluded)
//   w -= lr * trust * u
//
// Excluded parameters (Note [Excluded parameters]) get no weight decay and trust 1 (plain Adam).
// State slots "exp_avg" (m) and "exp_avg_sq" (v).
//
// Note [LAMB passes]: the trust ratio needs ||u|| before any w may change, so the update takes
// two passes. The first updates m and v and sums u^2 and w^2; the second recomputes u from the new
// m and v (the same arithmetic, so the same values) and writes w. Recomputing costs two more
// reads per element but no scratch buffer the size of the parameter.
#ifndef PADDLE_OPTIM_LAMB_H_
#define PADDLE_OPTIM_LAMB_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/optim/optimizer.h"

namespace paddle::optim {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  ExcludePredicate exclude;  // null: ExcludeBelow2D
};

class Lamb final : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Lamb>> Create(std::vector<autograd::Variable> params,
                                                      LambOptions options);
  const LambOptions& options() const { return options_; }

 private:
  Lamb(std::vector<autograd::Variable> params, LambOptions options);
  void Update(const ParamUpdate& p) override;
  // Note [Layer norms across ranks]: pass one gives {||u||^2, ||w||^2}, pass two the update.
  int NumNormSums() const override { return 2; }
  void NormSums(const ParamUpdate& p, double* sums) override;
  void ApplyNorms(const ParamUpdate& p, const double* sums) override;

  LambOptions options_;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_LAMB_H_
