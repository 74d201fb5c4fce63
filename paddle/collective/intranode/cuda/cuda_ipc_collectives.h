// Collectives of the ranks of one host on CUDA tensors, through CUDA IPC scratch buffers
// (CudaIpcWorkspace): the GPU counterpart of the node workspace's shm_collectives.h.
//
// Note [CUDA IPC phases]
// Data is processed in chunks that fit a scratch buffer; consecutive chunks (also across calls)
// alternate between each rank's two buffers. Allreduce of one chunk on rank r of n:
//   1. copy the chunk of the user's tensor into r's scratch buffer b;            barrier
//   2. reduce slice r (1/n of the chunk) of every rank's buffer b into slice r of r's own
//      buffer b, reading the peers' buffers directly (ipc_reduce_kernel.h);      barrier
//   3. copy slice j of rank j's buffer b into the user's tensor, for every j.
// Broadcast: the root copies into its buffer; barrier; the others copy from it. Allgather: each
// copies its input into its buffer; barrier; each copies every rank's buffer into its output.
// Reduce-scatter: each copies its n input blocks' pieces into its buffer; barrier; each reduces
// its own block's piece from every buffer into its output.
// Why two buffers and no barrier at the end of a chunk: a rank writes buffer b again two chunks
// later, after the first barrier of the chunk in between, which no peer passes before it has
// finished reading buffer b (its previous chunk's last phase).
//
// Synchronization (why host barriers, not cudaEvent IPC): before each barrier a rank waits, on
// the host, for its own stream with the operation's deadline (polling cudaStreamQuery), then
// runs a dissemination barrier over the communicator's transport (shared memory on one host).
// This reuses the transport's failure handling: a dead peer or a timeout fails the barrier with
// the peer, operation, sequence number and time waited, and poisons the communicator; no GPU
// wait is ever unbounded. Interprocess events would save the host round trip per phase (tens of
// microseconds) but a peer that dies leaves an event that never fires and that cannot be waited
// on with a deadline from another process's stream. At 32 MiB or more per phase the barrier
// costs well under 1% of the copy time.
//
// `producer` (may be null) is recorded on the legacy default stream when the call was made
// (Note [NCCL streams] in nccl_communicator.h): the first copy waits for it on the device. When a
// function returns OK the results are in device memory and complete; on error the tensors hold
// unspecified values and the transport is aborted (through the context).
#ifndef PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_COLLECTIVES_H_
#define PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_COLLECTIVES_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/intranode/cuda/cuda_ipc_workspace.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// ctx's transport must connect exactly the workspace's ranks (same rank numbers). Device pointers
// on the workspace's device.
absl::Status CudaIpcAllreduce(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, void* data,
                              int64_t count, DType dtype, ReduceOp op, cudaEvent_t producer);
absl::Status CudaIpcBroadcast(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, void* data,
                              int64_t count, DType dtype, int root, cudaEvent_t producer);
// `output` holds size x count elements; `input` may be this rank's block of it.
absl::Status CudaIpcAllgather(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, const void* input,
                              void* output, int64_t count, DType dtype, cudaEvent_t producer);
// `input` holds size x count elements; `output` (count) may be this rank's block of it, but may
// not overlap it otherwise.
absl::Status CudaIpcReduceScatter(const AlgorithmContext& ctx, CudaIpcWorkspace& ws,
                                  const void* input, void* output, int64_t count, DType dtype,
                                  ReduceOp op, cudaEvent_t producer);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_COLLECTIVES_H_
