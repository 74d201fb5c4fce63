// Dissemination barrier.
//
// Protocol (n ranks, rank r): rounds k = 0, 1, ... while 2^k < n (step k):
//   1. send a one-byte token to rank (r + 2^k) mod n;
//   2. receive the token of rank (r - 2^k) mod n.
// Why it works: after round k, rank r has heard (directly or through the ranks it heard from) from
// the 2^(k+1) - 1 ranks before it, r-1 .. r-(2^(k+1)-1); once 2^(k+1) >= n that is everyone, so
// no rank leaves round ceil(log2 n)-1 before all have entered. Unlike a gather-then-release tree
// there is no root to wait for: every rank finishes after ceil(log2 n) message latencies.
// Tokens are one byte, not zero, because no algorithm sends zero-byte messages (Note [Message
// tags]). Bytes on the wire per rank: ceil(log2 n) sent and received.
#include "paddle/collective/algorithms/dissemination_barrier.h"

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "dissemination barrier";

}  // namespace

absl::Status DisseminationBarrier(const AlgorithmContext& ctx) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const uint8_t token = 1;
  uint8_t received = 0;
  uint32_t step = 0;
  for (int d = 1; d < n; d *= 2, ++step) {
    PeerMessage recv = ctx.Recv(ModRank(r - d, n), &received, 1, step, kWhat);
    PeerMessage send = ctx.Send(ModRank(r + d, n), &token, 1, step, kWhat);
    RETURN_IF_ERROR(ctx.Wait(recv));
    RETURN_IF_ERROR(ctx.Wait(send));
  }
  return absl::OkStatus();
}

}  // namespace paddle
