// SparseRows: the gradient of a [num_rows, dim] parameter given as the rows it touches.
//
// Note [Sparse gradients]: an embedding lookup reads a few rows of a large table, so its gradient
// is zero except in those rows. A parameter marked sparse (Variable::set_sparse) gets its gradient
// as SparseRows held beside the dense slot (Variable::sparse_grad(); grad() stays undefined):
// `ids` names the rows, `rows` holds their gradients, duplicates allowed (one entry per lookup).
// Backward passes append; the reducer replaces the local gradient by the coalesced average over
// ranks (Note [Sparse exchange] in paddle/parallel/reducer/reducer.h); optimizers then update
// only those rows (Note [Lazy sparse updates] in paddle/optim/optimizer.h). CPU tensors only.
#ifndef PADDLE_CORE_AUTOGRAD_SPARSE_ROWS_H_
#define PADDLE_CORE_AUTOGRAD_SPARSE_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/core/tensor.h"

namespace paddle::autograd {

struct SparseRows {
  Tensor ids;            // int64 [n], contiguous CPU, each in [0, num_rows)
  Tensor rows;           // [n, dim], contiguous CPU, the parameter's dtype (float32 or float64)
  int64_t num_rows = 0;  // the parameter's dimension 0

  int64_t size() const { return ids.defined() ? ids.numel() : 0; }
  int64_t dim() const { return rows.dim() == 2 ? rows.shape()[1] : 0; }
};

// kInvalidArgument naming `what` and the problem: a parameter that is not 2-D float on the CPU,
// ids not int64 [n], rows not [n, dim] of the parameter's dtype, num_rows not the parameter's,
// or an id outside [0, num_rows) (naming the id, its position and num_rows).
absl::Status CheckSparseRows(const SparseRows& g, const Tensor& param, absl::string_view what);

// An empty gradient (n = 0) for `param`: ids int64 [0], rows [0, dim].
absl::StatusOr<SparseRows> EmptySparseRows(const Tensor& param);

// Sorted unique ids; rows of equal ids summed in the order they appear, so every rank that
// coalesces the same concatenation gets bit-identical rows.
absl::StatusOr<SparseRows> Coalesce(const SparseRows& g);

// a's entries, then b's (same num_rows, dim and dtype).
absl::StatusOr<SparseRows> ConcatSparseRows(const SparseRows& a, const SparseRows& b);

// The dense [num_rows, dim] gradient (duplicates summed).
absl::StatusOr<Tensor> SparseRowsToDense(const SparseRows& g);

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_SPARSE_ROWS_H_
