// Sparse exchange: averages the sparse gradients (Note [Sparse gradients] in
// paddle/core/autograd/sparse_rows.h) of embedding-like parameters over the ranks of a
// Communicator, outside the Reducer's dense buckets.
//
// Note [Sparse exchange]: for a [num_rows, dim] table a step touches a few rows, so allreducing
// the whole table moves num_rows * dim elements for a gradient that is mostly zeros. Instead, in
// FinalizeBackward after the dense buckets were launched (Note [Bucket order]: every rank issues
// the same collectives in the same order, so the sparse ones come after all the buckets, in
// parameter registration order):
//   1. each rank coalesces its local gradient (duplicate ids summed; no gradient = 0 entries);
//   2. one Allgather of the per-parameter entry counts (int64 [num_sparse] per rank), so every rank
//      knows every rank's counts and takes the same decision for each parameter;
//   3. per parameter, by Note [Sparse or dense]: either Allgatherv of the ids (int64) and of the
//      rows, then every rank concatenates them in rank order, coalesces (sums rows of equal ids in
//      that order: bit-identical on every rank) and divides by the world size; or, when that moves
//      more bytes, the dense fallback: one Allreduce(kAvg) of a [num_rows, dim + 1] table holding
//      the scattered rows plus a count column, whose nonzero rows (count > 0) become the result.
// Either way each rank's sparse_grad() ends as the same coalesced average with sorted ids: the
// rows touched on any rank, the average the dense path would give there. The dense fallback keeps
// the touched-row set (the count column), so the lazy optimizer update (Note [Lazy sparse
// updates] in paddle/optim/optimizer.h) does not depend on which way the bytes went. A parameter
// with no entries on any rank is left without a gradient on every rank (the optimizer skips it).
//
// Note [Sparse or dense]: with E entries over all ranks and b the element size, the allgather of
// ids and rows moves E * (8 + dim * b) bytes into every rank, so each rank sends about
// (W - 1) / W of that on a ring; the ring allreduce of the dense table sends 2 (W - 1) / W *
// num_rows * (dim + 1) * b per rank. Sparse is chosen when
//     E * (8 + dim * b) <= 2 * num_rows * (dim + 1) * b,
// the (W - 1) / W factors cancelling. A 1e6 x 16 float32 table with 4096 lookups per rank stays
// sparse up to ~450 ranks; a 1000-row table with 4096 lookups per rank on 4 ranks goes dense.
//
// CPU parameters only: the ids and rows are CPU tensors (a CUDA-only communicator, NCCL, cannot
// move them; the Reducer rejects sparse parameters on other devices).
#ifndef PADDLE_PARALLEL_REDUCER_SPARSE_EXCHANGE_H_
#define PADDLE_PARALLEL_REDUCER_SPARSE_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/autograd/variable.h"

namespace paddle {

// Note [Sparse or dense] for one parameter; bytes each rank sends under the ring model.
struct SparseExchangeChoice {
  bool dense = false;
  int64_t sparse_bytes = 0;  // (W - 1) / W * E * (8 + dim * b)
  int64_t dense_bytes = 0;   // 2 (W - 1) / W * num_rows * (dim + 1) * b
};
SparseExchangeChoice ChooseSparseExchange(int64_t total_entries, int64_t num_rows, int64_t dim,
                                          int64_t element_size, int world_size);

struct SparseExchangeStats {
  int64_t bytes_sent = 0;       // this rank, ring model, including the counts allgather
  int64_t dense_fallbacks = 0;  // parameters that went the dense way
  int64_t entries = 0;          // E summed over the parameters
};

// Steps 1-3 of Note [Sparse exchange] for `params` (each marked sparse, 2-D float on the CPU), in
// that order; collective: every rank passes the same parameters. `timeout` zero: the
// communicator's. On error the gradients are unspecified.
absl::StatusOr<SparseExchangeStats> ExchangeSparseGradients(
    absl::Span<const std::pair<std::string, autograd::Variable>> params, Communicator* comm,
    absl::Duration timeout);

}  // namespace paddle

#endif  // PADDLE_PARALLEL_REDUCER_SPARSE_EXCHANGE_H_
