// Intra-node collectives over the node workspace (paddle/collective/intranode/node_workspace.h):
// the ranks of one host read each other's shared slots directly instead of passing messages, so a
// byte is copied once into shared memory and once out, and the reduction reads the peers' data
// where it lies.
//
//   ShmAllreduce      every local rank reduces its 1/n block of each round's data, then all read
//                     the reduced blocks (small messages: every rank reduces everything)
//   ShmReduceScatter  the first half of that, results into `output`
//   ShmAllgather      each rank's input through its slot to every rank's output
//   ShmBroadcast      the root's data through its slot
//   ShmAlltoall       each rank's blocks through its slot, each to the rank it is meant for
//   HierarchicalAllreduce  several hosts with several ranks each: ShmReduceScatter within the
//                     host, an allreduce of each block among the ranks of that local rank across
//                     hosts (over the transport, with the usual algorithms), ShmAllgather within
//                     the host
//
// Every local rank calls the same function with the same arguments (shapes, dtype, op, root),
// as for any collective. Results are bitwise identical on every rank (each element is reduced by
// exactly one rank, in a fixed order). Steps and bytes: docs/algorithms.md.
#ifndef PADDLE_COLLECTIVE_INTRANODE_SHM_COLLECTIVES_H_
#define PADDLE_COLLECTIVE_INTRANODE_SHM_COLLECTIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/algorithms/algorithm_selector.h"
#include "paddle/collective/intranode/node_workspace.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// Messages up to this size take the one-phase path: every rank reduces the whole message from
// all slots (one synchronisation instead of two).
inline constexpr size_t kShmSmallMessageBytes = size_t{32} << 10;

// The hierarchical allreduce of buffers of at least twice this size runs in chunks of this size
// (at most kMaxHierarchicalChunks of them), the network step of one chunk overlapping the
// shared-memory steps of the next (Note [Pipelined hierarchical allreduce]).
inline constexpr size_t kHierarchicalChunkBytes = size_t{4} << 20;
inline constexpr int64_t kMaxHierarchicalChunks = 200;

// In place over `count` elements of `data`.
absl::Status ShmAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws, void* data, int64_t count,
                          DType dtype, ReduceOp op);
// `input` holds local_size blocks of `block_count` elements; local rank r receives the reduction
// of block r in `output` (which may alias input's block r, but no other part of input).
absl::Status ShmReduceScatter(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                              void* output, int64_t block_count, DType dtype, ReduceOp op);
// `output` (local_size x count elements, rank-major) receives every local rank's `input`;
// `input` may be this rank's block of `output`.
absl::Status ShmAllgather(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                          void* output, int64_t count, DType dtype);
// `root` is a local rank.
absl::Status ShmBroadcast(const AlgorithmContext& ctx, NodeWorkspace& ws, void* data, int64_t count,
                          DType dtype, int root);

// `input` holds local_size blocks of `count` elements, block j for the rank of local rank j;
// `output` receives in block i local rank i's block for this rank. `output` is either `input`
// (in place) or does not overlap it.
absl::Status ShmAlltoall(const AlgorithmContext& ctx, NodeWorkspace& ws, const void* input,
                         void* output, int64_t count, DType dtype);

// HierarchicalAllreduce of large buffers (see kHierarchicalChunkBytes); same contract.
absl::Status PipelinedHierarchicalAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws,
                                            const std::vector<int>& cross_ranks,
                                            const AlgorithmSelector& selector, uint8_t* data,
                                            int64_t count, DType dtype, ReduceOp op);

// The hosts' ranks: ctx is the whole group's (ctx.transport() reaches every rank); `cross_ranks`
// are the global ranks with this rank's local rank, one per host in host order (this rank among
// them). Every host must have ws.local_size() ranks. `selector` picks the cross-host algorithm.
absl::Status HierarchicalAllreduce(const AlgorithmContext& ctx, NodeWorkspace& ws,
                                   const std::vector<int>& cross_ranks,
                                   const AlgorithmSelector& selector, void* data, int64_t count,
                                   DType dtype, ReduceOp op);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_SHM_COLLECTIVES_H_
