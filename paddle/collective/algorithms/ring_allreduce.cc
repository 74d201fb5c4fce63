// Ring allreduce = ring reduce-scatter, then ring allgather, over the same blocks.
//
// Protocol (n ranks, rank r; the buffer cut into n blocks differing by at most one element):
//   1. RingReduceScatter (steps 0..n-2): afterwards block r holds the reduction of every rank's
//      block r (already divided by n for kAvg, so the division is done once per element, by the
//      rank that owns it, and reaches every rank as the same bits);
//   2. RingAllgatherv on the same blocks (steps n-1..2n-3): every rank forwards the reduced
//      blocks around the ring until each has all of them.
// Both phases are pipelined in pieces of ctx.piece_bytes(): while one piece is on the wire the
// previous one is being reduced (ring_reduce_scatter.cc) or forwarded (ring_allgather.cc).
// Bytes on the wire per rank: 2(n-1)/n of the buffer sent and as much received, in 2(n-1) steps.
// World size 1 and count 0 send nothing.
#include "paddle/collective/algorithms/ring_allreduce.h"

#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/collective/algorithms/ring_allgather.h"
#include "paddle/collective/algorithms/ring_reduce_scatter.h"
#include "paddle/core/status.h"

namespace paddle {

absl::Status RingAllreduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  const int n = ctx.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  const std::vector<int64_t> counts = EvenCounts(count, n);
  RETURN_IF_ERROR(RingReduceScatter(ctx, data, counts, dtype, op));
  return RingAllgatherv(ctx.AfterSteps(static_cast<uint32_t>(n - 1)), data, counts, dtype);
}

}  // namespace paddle
