// LARS: layer-wise adaptive rate scaling (You, Gitman and Ginsburg 2017), the large-batch SGD of
// ImageNet-in-minutes training. Each parameter w (a "layer") gets its own trust ratio
//
//   trust = eta * ||w|| / (||g|| + wd * ||w||)
//
// (1 when either norm is 0 or the parameter is excluded, Note [Excluded parameters]), then
//
//   g' = g + wd * w          (not for excluded parameters)
//   v  = momentum * v + lr * trust * g'
//   w -= v
//
// Two passes per parameter: one reading (w, g) for the norms, one fused update of (w, g, v)
// (the phases of Note [Layer norms across ranks] in optimizer.h).
// State slot "momentum" (v).
#ifndef PADDLE_OPTIM_LARS_H_
#define PADDLE_OPTIM_LARS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/optim/optimizer.h"

namespace paddle::optim {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  double eta = 0.001;        // trust coefficient
  ExcludePredicate exclude;  // null: ExcludeBelow2D
};

class Lars final : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Lars>> Create(std::vector<autograd::Variable> params,
                                                      LarsOptions options);
  const LarsOptions& options() const { return options_; }

 private:
  Lars(std::vector<autograd::Variable> params, LarsOptions options);
  void Update(const ParamUpdate& p) override;
  // Note [Layer norms across ranks]: {||w||^2, ||g||^2}, then the update.
  int NumNormSums() const override { return 2; }
  void NormSums(const ParamUpdate& p, double* sums) override;
  void ApplyNorms(const ParamUpdate& p, const double* sums) override;

  LarsOptions options_;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_LARS_H_
