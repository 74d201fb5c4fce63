// Tree broadcast: a binomial tree from the root, log2(n) rounds of the whole buffer. The
// latency-optimal broadcast for small buffers.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_TREE_BROADCAST_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_TREE_BROADCAST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/core/dtype.h"

namespace paddle {

// `data` (count elements of `dtype`) of rank `root` is copied into `data` of every rank. Uses
// step 0.
absl::Status TreeBroadcast(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           int root);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_TREE_BROADCAST_H_
