// The one GPU kernel of the CUDA IPC collectives: out[i] = in[0][i] op in[1][i] op ... op
// in[n-1][i], where the inputs are this rank's and its peers' scratch buffers (peer pointers
// opened with cudaIpcOpenMemHandle) and `out` is local device memory.
//
// Arithmetic (Note [IPC reduction arithmetic]): float16 and bfloat16 accumulate in float32 and
// round once at the end, so the result can differ from the CPU path (which rounds after every
// pairwise step) by at most one rounding per step; sums of integers exactly representable in the
// type agree bit for bit. kAvg is the sum divided by n (in float32 for the half types) with one
// final rounding. Integer sums and products wrap modulo 2^bits. Floating-point min/max propagate
// NaN and order -0 below +0, as Note [Reduction semantics] asks of the CPU path.
#ifndef PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_REDUCE_KERNEL_H_
#define PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_REDUCE_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// Most ranks one kernel call reduces (the peer pointers travel as a kernel argument).
constexpr int kMaxIpcRanks = 8;

// True if the kernel handles `dtype` with `op` (every dtype/op pair CheckReduction accepts).
bool IpcReduceSupports(DType dtype, ReduceOp op);

// Queues the reduction of `count` elements on `stream`. `inputs[0..n)` are device pointers
// readable from this device; `out` may equal one of them (each element is read before it is
// written). kInvalidArgument for n outside [1, kMaxIpcRanks], an unsupported dtype/op pair or a
// negative count; the launch error from CUDA otherwise.
absl::Status LaunchIpcReduce(void* out, const void* const* inputs, int n, int64_t count,
                             DType dtype, ReduceOp op, cudaStream_t stream);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_REDUCE_KERNEL_H_
