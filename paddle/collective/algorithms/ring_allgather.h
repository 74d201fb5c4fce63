// Ring allgather(v): every rank ends with every rank's block, each link carrying (n-1)/n of the
// result. It is also the second half of RingAllreduce.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLGATHER_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLGATHER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/core/dtype.h"

namespace paddle {

// In place, per-rank counts. `data` holds sum(counts) elements of `dtype`; block i has counts[i]
// elements and follows blocks 0..i-1. On entry block `ctx.rank()` holds this rank's contribution
// (the caller copies it there); on return block i holds rank i's. `counts` must be the same on
// every rank. Uses steps 0..n-2 (Note [Message tags]).
absl::Status RingAllgatherv(const AlgorithmContext& ctx, void* data,
                            absl::Span<const int64_t> counts, DType dtype);

// RingAllgatherv with `count` elements from every rank: `data` holds size() * count elements.
absl::Status RingAllgather(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLGATHER_H_
