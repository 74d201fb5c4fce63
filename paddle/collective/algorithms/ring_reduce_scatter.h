// Ring reduce-scatter: every rank ends with the reduction of one block, each link carrying
// (n-1)/n of the buffer. It is also the first half of RingAllreduce.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_RING_REDUCE_SCATTER_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_RING_REDUCE_SCATTER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// In place. `data` holds sum(counts) elements of `dtype`: block i (counts[i] elements, after
// blocks 0..i-1) is this rank's contribution to rank i's result. On return block `ctx.rank()`
// holds the reduction over all ranks of their block rank (divided by the world size for kAvg);
// the other blocks hold partial results. `counts` must be the same on every rank. Uses steps
// 0..n-2 (Note [Message tags]).
absl::Status RingReduceScatter(const AlgorithmContext& ctx, void* data,
                               absl::Span<const int64_t> counts, DType dtype, ReduceOp op);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_RING_REDUCE_SCATTER_H_
