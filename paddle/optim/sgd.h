// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, with
// PyTorch's semantics (torch.optim.SGD), per element of each parameter w with gradient g:
//
//   g += wd * w                          (wd is 0 for excluded parameters, Note [Excluded
//   parameters]) buf = g                              on the parameter's first update buf =
//   momentum * buf + (1 - dampening) * g   afterwards g = nesterov ? g + momentum * buf : buf (only
//   with momentum != 0) w -= lr * g
//
// State slot "momentum" exists only when momentum != 0. CUDA parameters (float32) are updated by
// ops::cuda::SgdUpdate (Note [CUDA parameters] in optimizer.h).
#ifndef PADDLE_OPTIM_SGD_H_
#define PADDLE_OPTIM_SGD_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/optim/optimizer.h"

namespace paddle::optim {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0
  double weight_decay = 0.0;
  ExcludePredicate exclude;  // null: ExcludeBelow2D
};

class Sgd final : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Sgd>> Create(std::vector<autograd::Variable> params,
                                                     SgdOptions options);
  const SgdOptions& options() const { return options_; }

 private:
  Sgd(std::vector<autograd::Variable> params, SgdOptions options);
  void Update(const ParamUpdate& p) override;
  bool SupportsSparse() const override { return true; }  // Note [Lazy sparse updates]
  // ops::cuda::SgdUpdate: the same math in one fused kernel over fp32 CUDA tensors.
  bool SupportsCuda() const override { return true; }
  absl::Status UpdateCuda(const ParamUpdate& p) override;

  SgdOptions options_;
};

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_SGD_H_
