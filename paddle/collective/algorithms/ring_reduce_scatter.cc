// Ring reduce-scatter, pipelined.
//
// Protocol (n ranks, rank r, left = r-1, right = r+1, all mod n; block b = counts[b] elements):
//   Every block is cut into the same number P of pieces (partition.h), so that pieces are at most
//   ctx.piece_bytes(). Steps s = 0 .. n-2:
//     1. send piece q of block (r-1-s) to the right: at s = 0 that is this rank's own contribution,
//        later the block this rank reduced in step s-1;
//     2. receive piece q of block (r-2-s) from the left into scratch and reduce it into `data`.
//   After step n-2 block (r-2-(n-2)) = r holds every rank's contribution: rank r owns block r.
//   For kAvg, rank r then divides block r by n.
// Pipelining: the (step, piece) items run in order through two scratch slots. Before waiting for
// item i the receive of item i+1 is posted into the other slot (free: item i-1 is reduced), so
// the next piece is on the wire, and lands in place, while this one is reduced; up to
// kPipelineSends sends are in flight. Sends read blocks that no later step writes, so they may
// complete late; all are waited before returning.
// Bytes on the wire per rank: sends every block but its own (total - counts[r]), receives every
// block but its left neighbour's (total - counts[r-1]): (n-1)/n of the buffer each way when the
// counts are equal, in n-1 steps.
#include "paddle/collective/algorithms/ring_reduce_scatter.h"

#include <algorithm>
#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "ring reduce-scatter";

}  // namespace

absl::Status RingReduceScatter(const AlgorithmContext& ctx, void* data,
                               absl::Span<const int64_t> counts, DType dtype, ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckCounts(counts, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  const std::vector<int64_t> offsets = PrefixOffsets(counts);
  const int n = ctx.size();
  const int r = ctx.rank();
  RETURN_IF_ERROR(ctx.CheckBuffer(data, offsets.back() + counts.back(), dtype));
  uint8_t* base = static_cast<uint8_t*>(data);

  if (n > 1) {
    const int left = ModRank(r - 1, n);
    const int right = ModRank(r + 1, n);
    const int64_t pieces = PiecesPerBlock(counts, dtype, ctx.piece_bytes());
    // Piece q of block b, in elements from the start of `data`.
    auto piece = [&](int b, int64_t q) {
      ElementRange p = EvenPart(counts[b], pieces, q);
      p.offset += offsets[b];
      return p;
    };
    const int64_t largest = *std::max_element(counts.begin(), counts.end());
    const size_t slot_bytes = ByteOffset((largest + pieces - 1) / pieces, dtype);
    uint8_t* const scratch = ctx.Scratch(2 * slot_bytes);  // outlives the messages below

    PeerMessage recvs[2];
    MessageWindow sends(ctx, kPipelineSends);
    const int64_t items = (n - 1) * pieces;
    auto post_recv = [&](int64_t i) {
      const int64_t s = i / pieces;
      const ElementRange p = piece(ModRank(r - 2 - s, n), i % pieces);
      recvs[i % 2] = ctx.Recv(left, scratch + (i % 2) * slot_bytes, ByteOffset(p.count, dtype),
                              static_cast<uint32_t>(s), kWhat);
    };
    post_recv(0);
    for (int64_t i = 0; i < items; ++i) {
      const int64_t s = i / pieces;
      const int64_t q = i % pieces;
      const ElementRange out = piece(ModRank(r - 1 - s, n), q);
      RETURN_IF_ERROR(
          sends.Add(ctx.Send(right, base + ByteOffset(out.offset, dtype),
                             ByteOffset(out.count, dtype), static_cast<uint32_t>(s), kWhat)));
      // The other slot's item (i-1) is reduced already: post the next receive into it before
      // waiting, so a piece that arrives early lands in place instead of being buffered.
      if (i + 1 < items) post_recv(i + 1);
      RETURN_IF_ERROR(ctx.Wait(recvs[i % 2]));
      const ElementRange in = piece(ModRank(r - 2 - s, n), q);
      const absl::Status reduced = Reduce(base + ByteOffset(in.offset, dtype),
                                          scratch + (i % 2) * slot_bytes, in.count, dtype, op);
      if (!reduced.ok()) return ctx.Fail(reduced);
    }
    RETURN_IF_ERROR(sends.WaitAll());
  }
  if (op == ReduceOp::kAvg) {
    const absl::Status s = FinishAvg(base + ByteOffset(offsets[r], dtype), counts[r], dtype, n);
    if (!s.ok()) return ctx.Fail(s);
  }
  return absl::OkStatus();
}

}  // namespace paddle
