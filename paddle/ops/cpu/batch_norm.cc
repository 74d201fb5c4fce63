// Batch norm: the input is seen as [outer, C, inner] (NCHW: outer = N, inner = H*W; [N, C]:
// inner = 1; channels-last: outer = N*H*W, inner = 1), which covers every supported layout with
// one set of loops.
#include "paddle/ops/cpu/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using internal::CheckTensor;
using internal::Describe;

struct BnLayout {
  Tensor x;  // dense: contiguous or channels-last
  int64_t outer, c, inner;
};

absl::StatusOr<BnLayout> CheckBn(const char* op, const Tensor& x) {
  RETURN_IF_ERROR(CheckTensor(op, "x", x, DType::kFloat32));
  if (x.dim() != 2 && x.dim() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x ", Describe(x), " must be [N, C] or [N, C, H, W]"));
  }
  BnLayout l;
  l.c = x.shape()[1];
  if (x.dim() == 4 && internal::IsChannelsLast(x) && !x.is_contiguous()) {
    l.x = x;
    l.outer = x.shape()[0] * x.shape()[2] * x.shape()[3];
    l.inner = 1;
  } else {
    ASSIGN_OR_RETURN(l.x, x.Contiguous());
    l.outer = x.shape()[0];
    l.inner = x.dim() == 4 ? x.shape()[2] * x.shape()[3] : 1;
  }
  return l;
}

absl::Status CheckChannelVector(const char* op, const char* name, const Tensor& t, int64_t c) {
  RETURN_IF_ERROR(CheckTensor(op, name, t, DType::kFloat32, 1));
  if (t.shape()[0] != c) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " ", Describe(t), " must have one entry per channel, ", c));
  }
  return absl::OkStatus();
}

std::vector<float> ToVector(const Tensor& t) {
  std::vector<float> v(t.numel());
  absl::StatusOr<Tensor> c = t.Contiguous();
  PADDLE_CHECK(c.ok()) << c.status();
  std::copy(c->data<float>(), c->data<float>() + t.numel(), v.begin());
  return v;
}

// out[c] += f(element, c) over every element, in storage order.
template <typename F>
void ForEach(const BnLayout& l, F f) {
  const float* xp = l.x.data<float>();
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t ch = 0; ch < l.c; ++ch) {
      const int64_t base = (o * l.c + ch) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) f(base + i, ch, xp[base + i]);
    }
  }
}

// y[k] = x[k] * scale[c] + shift[c], y in x's layout.
absl::StatusOr<Tensor> Affine(const BnLayout& l, const std::vector<float>& scale,
                              const std::vector<float>& shift) {
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyLike(l.x, DType::kFloat32));
  float* yp = y.data<float>();
  ForEach(l, [&](int64_t k, int64_t ch, float v) { yp[k] = v * scale[ch] + shift[ch]; });
  return y;
}

}  // namespace

absl::StatusOr<BatchNormForwardResult> BatchNormForwardTrain(const Tensor& x, const Tensor& gamma,
                                                             const Tensor& beta,
                                                             Tensor* running_mean,
                                                             Tensor* running_var, double momentum,
                                                             double eps) {
  constexpr const char* kOp = "BatchNormForwardTrain";
  ASSIGN_OR_RETURN(BnLayout l, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "beta", beta, l.c));
  for (Tensor* r : {running_mean, running_var}) {
    if (r == nullptr) continue;
    RETURN_IF_ERROR(CheckChannelVector(kOp, "running statistic", *r, l.c));
    if (!r->is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": running statistic ", Describe(*r), " must be contiguous"));
    }
  }
  const int64_t m = l.outer * l.inner;
  if (m < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": x ", Describe(x), " has ", m, " value(s) per channel; training needs at least 2"));
  }
  if (!(eps > 0.0) || !(momentum >= 0.0 && momentum <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": eps = ", eps, " must be > 0 and momentum = ", momentum, " in [0, 1]"));
  }
  std::vector<double> sum(l.c, 0.0), sq(l.c, 0.0);
  ForEach(l, [&](int64_t, int64_t ch, float v) { sum[ch] += v; });
  std::vector<double> mean(l.c);
  for (int64_t ch = 0; ch < l.c; ++ch) mean[ch] = sum[ch] / static_cast<double>(m);
  ForEach(l, [&](int64_t, int64_t ch, float v) {
    const double d = v - mean[ch];
    sq[ch] += d * d;
  });
  BatchNormForwardResult r;
  ASSIGN_OR_RETURN(r.save_mean, Tensor::Empty({l.c}, DType::kFloat32));
  ASSIGN_OR_RETURN(r.save_invstd, Tensor::Empty({l.c}, DType::kFloat32));
  const std::vector<float> g = ToVector(gamma);
  const std::vector<float> b = ToVector(beta);
  std::vector<float> scale(l.c), shift(l.c);
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double var = sq[ch] / static_cast<double>(m);
    const double invstd = 1.0 / std::sqrt(var + eps);
    r.save_mean.data<float>()[ch] = static_cast<float>(mean[ch]);
    r.save_invstd.data<float>()[ch] = static_cast<float>(invstd);
    scale[ch] = static_cast<float>(g[ch] * invstd);
    shift[ch] = static_cast<float>(b[ch] - mean[ch] * g[ch] * invstd);
    if (running_mean != nullptr) {
      float& rm = running_mean->data<float>()[ch];
      rm = static_cast<float>((1.0 - momentum) * rm + momentum * mean[ch]);
    }
    if (running_var != nullptr) {
      float& rv = running_var->data<float>()[ch];
      const double unbiased = sq[ch] / static_cast<double>(m - 1);
      rv = static_cast<float>((1.0 - momentum) * rv + momentum * unbiased);
    }
  }
  ASSIGN_OR_RETURN(r.y, Affine(l, scale, shift));
  return r;
}

absl::StatusOr<Tensor> BatchNormForwardEval(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, const Tensor& running_mean,
                                            const Tensor& running_var, double eps) {
  constexpr const char* kOp = "BatchNormForwardEval";
  ASSIGN_OR_RETURN(BnLayout l, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "beta", beta, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "running_mean", running_mean, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "running_var", running_var, l.c));
  if (!(eps > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": eps = ", eps, " must be > 0"));
  }
  const std::vector<float> g = ToVector(gamma);
  const std::vector<float> b = ToVector(beta);
  const std::vector<float> rm = ToVector(running_mean);
  const std::vector<float> rv = ToVector(running_var);
  std::vector<float> scale(l.c), shift(l.c);
  for (int64_t ch = 0; ch < l.c; ++ch) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[ch]) + eps);
    scale[ch] = static_cast<float>(g[ch] * invstd);
    shift[ch] = static_cast<float>(b[ch] - rm[ch] * g[ch] * invstd);
  }
  return Affine(l, scale, shift);
}

absl::StatusOr<BatchNormGrads> BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& save_mean, const Tensor& save_invstd,
                                                 const Tensor& dy) {
  constexpr const char* kOp = "BatchNormBackward";
  ASSIGN_OR_RETURN(BnLayout l, CheckBn(kOp, x));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "gamma", gamma, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "save_mean", save_mean, l.c));
  RETURN_IF_ERROR(CheckChannelVector(kOp, "save_invstd", save_invstd, l.c));
  RETURN_IF_ERROR(CheckTensor(kOp, "dy", dy, DType::kFloat32));
  RETURN_IF_ERROR(internal::CheckSameShape(kOp, "x", x, "dy", dy));
  ASSIGN_OR_RETURN(Tensor dyl, internal::MatchLayout(dy, l.x));
  const float* gp = dyl.data<float>();
  const std::vector<float> g = ToVector(gamma);
  const std::vector<float> mean = ToVector(save_mean);
  const std::vector<float> invstd = ToVector(save_invstd);
  std::vector<double> dbeta(l.c, 0.0), dgamma(l.c, 0.0);
  ForEach(l, [&](int64_t k, int64_t ch, float v) {
    dbeta[ch] += gp[k];
    dgamma[ch] += static_cast<double>(gp[k]) * ((v - mean[ch]) * invstd[ch]);
  });
  BatchNormGrads grads;
  ASSIGN_OR_RETURN(grads.dgamma, Tensor::Empty({l.c}, DType::kFloat32));
  ASSIGN_OR_RETURN(grads.dbeta, Tensor::Empty({l.c}, DType::kFloat32));
  ASSIGN_OR_RETURN(grads.dx, internal::EmptyLike(l.x, DType::kFloat32));
  const double m = static_cast<double>(l.outer * l.inner);
  // dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
  std::vector<float> a(l.c), bmean(l.c), cg(l.c);
  for (int64_t ch = 0; ch < l.c; ++ch) {
    grads.dgamma.data<float>()[ch] = static_cast<float>(dgamma[ch]);
    grads.dbeta.data<float>()[ch] = static_cast<float>(dbeta[ch]);
    a[ch] = g[ch] * invstd[ch];
    bmean[ch] = static_cast<float>(dbeta[ch] / m);
    cg[ch] = static_cast<float>(dgamma[ch] / m);
  }
  float* dxp = grads.dx.data<float>();
  ForEach(l, [&](int64_t k, int64_t ch, float v) {
    const float xhat = (v - mean[ch]) * invstd[ch];
    dxp[k] = a[ch] * (gp[k] - bmean[ch] - xhat * cg[ch]);
  });
  return grads;
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
