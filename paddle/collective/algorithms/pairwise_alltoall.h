// Pairwise all-to-all(v): every rank sends a block to every other rank, one partner per step, so
// each step is a perfect matching of send/receive pairs and no rank is flooded by n-1 senders.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_PAIRWISE_ALLTOALL_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_PAIRWISE_ALLTOALL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/core/dtype.h"

namespace paddle {

// `in` holds sum(send_counts) elements: block j (send_counts[j] elements, after blocks 0..j-1)
// goes to rank j. `out` holds sum(recv_counts) elements: block i receives rank i's block for this
// rank. recv_counts[i] on this rank must equal send_counts[this rank] on rank i (a mismatch fails
// with both sizes). `in` and `out` must not overlap. Uses steps 1..n-1.
absl::Status PairwiseAlltoallv(const AlgorithmContext& ctx, const void* in,
                               absl::Span<const int64_t> send_counts, void* out,
                               absl::Span<const int64_t> recv_counts, DType dtype);

// PairwiseAlltoallv with `count` elements in every block: `in` and `out` hold size() * count.
absl::Status PairwiseAlltoall(const AlgorithmContext& ctx, const void* in, void* out, int64_t count,
                              DType dtype);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_PAIRWISE_ALLTOALL_H_
