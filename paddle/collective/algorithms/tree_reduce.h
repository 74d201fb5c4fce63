// Tree reduce: the reduction over all ranks, delivered to one root, over a binomial tree in
// ceil(log2 n) rounds.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_TREE_REDUCE_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_TREE_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// On rank `root`, `data` (count elements of `dtype`) becomes the reduction over all ranks; on the
// other ranks it is left unchanged. Uses step 0.
absl::Status TreeReduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                        ReduceOp op, int root);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_TREE_REDUCE_H_
