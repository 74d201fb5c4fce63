// Ring allreduce: bandwidth-optimal allreduce for large buffers (every rank sends and receives
// 2(n-1)/n of the buffer, the least possible), at the price of 2(n-1) steps of latency.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLREDUCE_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLREDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// In place: `data` (count elements of `dtype`) becomes the reduction over all ranks, the same bits
// on every rank. Uses steps 0..2n-3 (Note [Message tags]).
absl::Status RingAllreduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           ReduceOp op);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_RING_ALLREDUCE_H_
