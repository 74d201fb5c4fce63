// Embedding: a table of num_rows vectors of size dim, looked up by int64 ids.
//
// Forward gathers rows: ids of any shape [...] give [..., dim]; an id outside [0, num_rows) is
// kInvalidArgument naming the table, the id, its flat position and num_rows. The backward pass
// either scatters the output gradient into a dense [num_rows, dim] grad() (sparse = false, the
// reference path; functional::Embedding) or, with sparse = true, appends SparseRows {ids,
// gradient rows} to the weight's sparse gradient (Note [Sparse gradients] in
// paddle/core/autograd/sparse_rows.h): memory and traffic proportional to the lookups, not to
// the table. The weight starts as PyTorch's does: N(0, 1), drawn from the Generator.
#ifndef PADDLE_NN_EMBEDDING_H_
#define PADDLE_NN_EMBEDDING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/module.h"

namespace paddle::nn {

class Embedding : public Module {
 public:
  // num_rows >= 1 and dim >= 1 (CHECKed: a layer's shape is the programmer's choice).
  Embedding(int64_t num_rows, int64_t dim, Generator* init, bool sparse = false);
  // `ids`: int64 of any shape, on the CPU; no gradient flows to them.
  absl::StatusOr<Variable> Forward(const Variable& ids) override;

  const Variable& weight() const { return weight_; }
  bool sparse() const { return sparse_; }
  int64_t num_rows() const { return weight_.shape()[0]; }
  int64_t dim() const { return weight_.shape()[1]; }

 private:
  bool sparse_;
  Variable weight_;
};

namespace functional {
// weight [V, D] marked sparse (Variable::set_sparse), indices int64 of any shape -> [..., D]; the
// backward appends SparseRows to weight's sparse gradient instead of returning a dense one.
absl::StatusOr<Variable> SparseEmbedding(const Variable& weight, const Tensor& indices);
}  // namespace functional

}  // namespace paddle::nn

#endif  // PADDLE_NN_EMBEDDING_H_
