// Tree broadcast over a binomial tree.
//
// Protocol (n ranks; v = (rank - root) mod n, so the root is v = 0):
//   1. v > 0 receives the buffer from v - lowbit(v), its parent (the rank that has v's lowest set
//      bit cleared);
//   2. then, for d = the largest power of two below lowbit(v) (the largest below n for the root),
//      halving down to 1: if v + d < n, send the buffer to v + d.
//   In round k the 2^k ranks that have the data send it to 2^k more: ceil(log2 n) rounds.
// Buffers larger than ctx.piece_bytes() go piece by piece: a rank forwards piece q to its children
// as soon as it has it (sends in flight, up to kPipelineSends) while piece q+1 arrives, so the
// pieces flow down the tree in a pipeline.
// Bytes on the wire: every rank but the root receives N; a rank sends N to each of its children
// (the root to ceil(log2 n) of them).
#include "paddle/collective/algorithms/tree_broadcast.h"

#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "binomial tree broadcast";

}  // namespace

absl::Status TreeBroadcast(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           int root) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  RETURN_IF_ERROR(ctx.CheckRoot(root));
  const int n = ctx.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  const int v = ModRank(ctx.rank() - root, n);
  auto rank_of = [&](int u) { return ModRank(u + root, n); };

  // Parent: clear the lowest set bit. Children: v + d for d below that bit (any d for the root).
  int lowbit = 1;
  while (lowbit < n && (v & lowbit) == 0) lowbit <<= 1;
  const int parent = v == 0 ? -1 : rank_of(v - lowbit);
  std::vector<int> children;
  for (int d = lowbit >> 1; d >= 1; d >>= 1) {
    if (v + d < n) children.push_back(rank_of(v + d));
  }

  const int64_t counts[1] = {count};
  const int64_t pieces = PiecesPerBlock(counts, dtype, ctx.piece_bytes());
  uint8_t* base = static_cast<uint8_t*>(data);
  auto piece = [&](int64_t q) {
    const ElementRange p = EvenPart(count, pieces, q);
    return std::make_pair(base + ByteOffset(p.offset, dtype), ByteOffset(p.count, dtype));
  };
  PeerMessage recvs[2];
  MessageWindow sends(ctx, kPipelineSends * (children.size() + 1));
  auto post_recv = [&](int64_t q) {
    const auto [ptr, bytes] = piece(q);
    recvs[q % 2] = ctx.Recv(parent, ptr, bytes, 0, kWhat);
  };
  if (parent >= 0) post_recv(0);
  for (int64_t q = 0; q < pieces; ++q) {
    if (parent >= 0) {
      if (q + 1 < pieces) post_recv(q + 1);
      RETURN_IF_ERROR(ctx.Wait(recvs[q % 2]));
    }
    const auto [ptr, bytes] = piece(q);
    for (int child : children) RETURN_IF_ERROR(sends.Add(ctx.Send(child, ptr, bytes, 0, kWhat)));
  }
  return sends.WaitAll();
}

}  // namespace paddle
