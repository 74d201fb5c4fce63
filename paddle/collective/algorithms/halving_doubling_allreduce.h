// Halving-doubling allreduce (Rabenseifner): reduce-scatter by recursive halving, then allgather
// by recursive doubling. Bandwidth-optimal like the ring (2(n-1)/n of the buffer per rank when n
// is a power of two) in 2*log2(n) steps instead of 2(n-1): the choice for medium buffers.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_HALVING_DOUBLING_ALLREDUCE_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_HALVING_DOUBLING_ALLREDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// In place: `data` (count elements of `dtype`) becomes the reduction over all ranks, the same bits
// on every rank. Uses steps 0..2*log2(n)+1.
absl::Status HalvingDoublingAllreduce(const AlgorithmContext& ctx, void* data, int64_t count,
                                      DType dtype, ReduceOp op);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_HALVING_DOUBLING_ALLREDUCE_H_
