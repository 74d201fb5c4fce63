// Embedding layer and the sparse-gradient lookup.
#include "paddle/nn/embedding.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/ops/cpu/embedding.h"

namespace paddle::nn {
namespace {

// N(0, 1) by Box-Muller from the generator's uniform stream.
Tensor NormalTensor(int64_t rows, int64_t dim, Generator* init) {
  const int64_t n = rows * dim;
  Tensor u = Tensor::Empty({n + (n & 1)}, DType::kFloat32).value();
  init->Uniform(&u, 0.0f, 1.0f);
  Tensor t = Tensor::Empty({rows, dim}, DType::kFloat32).value();
  const float* up = u.data<float>();
  float* tp = t.data<float>();
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(up[i])));
    const double a = 2.0 * M_PI * static_cast<double>(up[i + 1]);
    tp[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) tp[i + 1] = static_cast<float>(r * std::sin(a));
  }
  return t;
}

}  // namespace

Embedding::Embedding(int64_t num_rows, int64_t dim, Generator* init, bool sparse)
    : Module("Embedding"), sparse_(sparse) {
  PADDLE_CHECK(num_rows >= 1 && dim >= 1)
      << "Embedding(num_rows = " << num_rows << ", dim = " << dim << "): both must be >= 1";
  weight_ = RegisterParameter("weight", NormalTensor(num_rows, dim, init));
  weight_.set_sparse(sparse);
}

absl::StatusOr<Variable> Embedding::Forward(const Variable& ids) {
  absl::StatusOr<Variable> out = sparse_ ? functional::SparseEmbedding(weight_, ids.data())
                                         : functional::Embedding(weight_, ids.data());
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        absl::StrCat("Embedding '", weight_.name(), "' ",
                                     ShapeToString(weight_.shape()), ": ", out.status().message()));
  }
  return out;
}

namespace functional {

absl::StatusOr<Variable> SparseEmbedding(const Variable& weight, const Tensor& indices) {
  if (!weight.sparse()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse embedding of '", weight.name(), "': the weight is not marked sparse (set_sparse)"));
  }
  if (!indices.defined() || !indices.device().is_cpu() || !weight.data().device().is_cpu()) {
    return absl::UnimplementedError(
        absl::StrCat("sparse embedding of '", weight.name(), "': CPU tensors only (weight ",
                     weight.data().ToString(), ", indices ",
                     indices.defined() ? indices.ToString() : "undefined", ")"));
  }
  // Checks every id (naming the bad one, its position and the row count) before gathering.
  ASSIGN_OR_RETURN(Tensor y, ops::cpu::EmbeddingForward(weight.data(), indices));
  // A private copy of the ids: the caller may refill its batch buffer before backward.
  ASSIGN_OR_RETURN(Tensor ids, indices.Clone());
  ASSIGN_OR_RETURN(ids, ids.View({ids.numel()}));
  const int64_t num_rows = weight.shape()[0];
  const int64_t dim = weight.shape()[1];
  return autograd::RecordOperation(
      std::move(y), "sparse_embedding", {weight.GradientEdge()},
      [weight = Variable(weight), ids, num_rows,
       dim](const Tensor& g) mutable -> absl::StatusOr<std::vector<Tensor>> {
        ASSIGN_OR_RETURN(Tensor gc, g.Contiguous());
        autograd::SparseRows rows{ids, Tensor(), num_rows};
        ASSIGN_OR_RETURN(rows.rows, gc.View({ids.numel(), dim}));
        RETURN_IF_ERROR(weight.AccumulateSparseGrad(rows));
        // No dense gradient: the weight's AccumulateGrad node is reached but not run, so its
        // grad() stays undefined and its gradient-ready hooks do not fire.
        return std::vector<Tensor>{Tensor()};
      });
}

}  // namespace functional
}  // namespace paddle::nn
