// Ring broadcast: a chain root -> root+1 -> ... -> root+n-1 (mod n), pipelined in pieces.
//
// Protocol (n ranks; v = (rank - root) mod n, the position in the chain; the buffer cut into P
// pieces of at most ctx.piece_bytes()):
//   for each piece q = 0 .. P-1:
//     1. if v > 0, receive piece q from the previous rank, straight into `data`;
//     2. if v < n-1, send piece q to the next rank.
// Pipelining: the receive of piece q+1 is posted before piece q is forwarded, and up to
// kPipelineSends sends are in flight, so piece q moves down the chain while piece q+1 arrives.
// The last rank receives the last piece after (n-1) + (P-1) piece transfers.
// Bytes on the wire per rank: N received (except the root), N sent (except the last in the
// chain); (n-1) * N over all links.
#include "paddle/collective/algorithms/ring_broadcast.h"

#include <algorithm>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "ring broadcast";

}  // namespace

absl::Status RingBroadcast(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           int root) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  RETURN_IF_ERROR(ctx.CheckRoot(root));
  const int n = ctx.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  const int v = ModRank(ctx.rank() - root, n);
  const int prev = ModRank(ctx.rank() - 1, n);
  const int next = ModRank(ctx.rank() + 1, n);
  const int64_t counts[1] = {count};
  const int64_t pieces = PiecesPerBlock(counts, dtype, ctx.piece_bytes());
  uint8_t* base = static_cast<uint8_t*>(data);
  auto piece = [&](int64_t q) {
    const ElementRange p = EvenPart(count, pieces, q);
    return std::make_pair(base + ByteOffset(p.offset, dtype), ByteOffset(p.count, dtype));
  };

  PeerMessage recvs[2];
  MessageWindow sends(ctx, kPipelineSends);
  auto post_recv = [&](int64_t q) {
    const auto [ptr, bytes] = piece(q);
    recvs[q % 2] = ctx.Recv(prev, ptr, bytes, 0, kWhat);
  };
  if (v > 0) post_recv(0);
  for (int64_t q = 0; q < pieces; ++q) {
    if (v > 0) {
      if (q + 1 < pieces) post_recv(q + 1);
      RETURN_IF_ERROR(ctx.Wait(recvs[q % 2]));
    }
    if (v < n - 1) {
      const auto [ptr, bytes] = piece(q);
      RETURN_IF_ERROR(sends.Add(ctx.Send(next, ptr, bytes, 0, kWhat)));
    }
  }
  return sends.WaitAll();
}

}  // namespace paddle
