// Ring allgather(v), pipelined.
//
// Protocol (n ranks, rank r, left = r-1, right = r+1, all mod n):
//   Every block is cut into the same number P of pieces (partition.h). Steps s = 0 .. n-2:
//     1. send piece q of block (r-s) to the right: at s = 0 this rank's own block, later the block
//        received in step s-1;
//     2. receive piece q of block (r-s-1) from the left, straight into `data` (no copy).
//   After step n-2 the last block received is (r-n+1) = r+1: every block is present.
// Pipelining: receives land in place, so the receive of the next (step, piece) item is posted
// before waiting for the current one; a piece is forwarded to the right as soon as it has arrived,
// with up to kPipelineSends sends in flight. No received piece overwrites a block still being sent:
// block r-s is never received again after step s-1.
// Bytes on the wire per rank: sends every block but its right neighbour's (total - counts[r+1]),
// receives every block but its own (total - counts[r]): (n-1)/n of the result each way when the
// counts are equal, in n-1 steps.
#include "paddle/collective/algorithms/ring_allgather.h"

#include <utility>
#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "ring allgather";

}  // namespace

absl::Status RingAllgatherv(const AlgorithmContext& ctx, void* data,
                            absl::Span<const int64_t> counts, DType dtype) {
  RETURN_IF_ERROR(ctx.CheckCounts(counts, dtype));
  const std::vector<int64_t> offsets = PrefixOffsets(counts);
  RETURN_IF_ERROR(ctx.CheckBuffer(data, offsets.back() + counts.back(), dtype));
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1) return absl::OkStatus();
  uint8_t* base = static_cast<uint8_t*>(data);
  const int left = ModRank(r - 1, n);
  const int right = ModRank(r + 1, n);
  const int64_t pieces = PiecesPerBlock(counts, dtype, ctx.piece_bytes());
  // Piece q of block b as (byte address, bytes).
  auto piece = [&](int b, int64_t q) {
    const ElementRange p = EvenPart(counts[b], pieces, q);
    return std::make_pair(base + ByteOffset(offsets[b] + p.offset, dtype),
                          ByteOffset(p.count, dtype));
  };

  PeerMessage recvs[2];
  MessageWindow sends(ctx, kPipelineSends);
  const int64_t items = (n - 1) * pieces;
  auto post_recv = [&](int64_t i) {
    const int64_t s = i / pieces;
    const auto [ptr, bytes] = piece(ModRank(r - s - 1, n), i % pieces);
    recvs[i % 2] = ctx.Recv(left, ptr, bytes, static_cast<uint32_t>(s), kWhat);
  };
  post_recv(0);
  for (int64_t i = 0; i < items; ++i) {
    const int64_t s = i / pieces;
    const auto [ptr, bytes] = piece(ModRank(r - s, n), i % pieces);
    RETURN_IF_ERROR(sends.Add(ctx.Send(right, ptr, bytes, static_cast<uint32_t>(s), kWhat)));
    if (i + 1 < items) post_recv(i + 1);
    RETURN_IF_ERROR(ctx.Wait(recvs[i % 2]));
  }
  return sends.WaitAll();
}

absl::Status RingAllgather(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype) {
  if (count < 0) return ctx.InvalidArgument("negative element count");
  const std::vector<int64_t> counts(static_cast<size_t>(ctx.size()), count);
  return RingAllgatherv(ctx, data, counts, dtype);
}

}  // namespace paddle
