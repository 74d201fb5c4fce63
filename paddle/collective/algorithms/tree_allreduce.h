// Tree allreduce (recursive doubling): the latency-optimal allreduce for small buffers. log2(n)
// rounds (two more when n is not a power of two), each exchanging the whole buffer with one
// partner; the selector uses it where the per-message latency, not the bytes, is the cost.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_TREE_ALLREDUCE_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_TREE_ALLREDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// In place: `data` (count elements of `dtype`) becomes the reduction over all ranks, the same bits
// on every rank (up to NaN payloads, Note [Reduction semantics]). Uses steps 0..log2(n)+1.
absl::Status TreeAllreduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           ReduceOp op);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_TREE_ALLREDUCE_H_
