// Tree reduce over a binomial tree: the broadcast tree of tree_broadcast.cc, run leaves first.
//
// Protocol (n ranks; v = (rank - root) mod n; lowbit(v) its lowest set bit, n rounded up to a
// power of two for the root):
//   1. receive the partial result of each child v + d (d = 1, 2, 4, ... below lowbit(v), while
//      v + d < n) and reduce it into an accumulator that starts as a copy of this rank's data
//      (the root accumulates in `data` itself; a leaf has nothing to receive and sends its data);
//   2. v > 0 sends the accumulator to its parent v - lowbit(v).
//   Child v + d covers ranks [v + d, v + 2d), so after step 1 rank v holds the reduction over
//   [v, v + lowbit(v)); the root holds it over everyone. For kAvg the root then divides by n.
// Buffers larger than ctx.piece_bytes() go segment by segment; the receives of segment q+1 are
// posted before segment q is reduced, and each rank's send of segment q overlaps its work on
// segment q+1 (two accumulators alternate).
// Bytes on the wire: every rank but the root sends N; a rank receives N from each child (the root
// from ceil(log2 n) of them).
#include "paddle/collective/algorithms/tree_reduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "binomial tree reduce";

}  // namespace

absl::Status TreeReduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                        ReduceOp op, int root) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  RETURN_IF_ERROR(ctx.CheckRoot(root));
  const int n = ctx.size();
  const int v = ModRank(ctx.rank() - root, n);
  auto rank_of = [&](int u) { return ModRank(u + root, n); };
  int lowbit = 1;
  while (lowbit < n && (v & lowbit) == 0) lowbit <<= 1;
  const int parent = v == 0 ? -1 : rank_of(v - lowbit);
  std::vector<int> children;  // nearest first: the leaf child v+1 is ready soonest
  for (int d = 1; d < lowbit && v + d < n; d <<= 1) children.push_back(rank_of(v + d));

  const int64_t segment =
      std::max<int64_t>(1, static_cast<int64_t>(ctx.piece_bytes() / DTypeSize(dtype)));
  const size_t slot = ByteOffset(std::min(segment, count), dtype);
  const bool accumulates_apart = parent >= 0 && !children.empty();
  // Receive slots: two sets (segments q and q+1) of one per child; then two accumulators.
  std::vector<uint8_t> scratch(slot * (2 * children.size() + (accumulates_apart ? 2 : 0)));
  auto recv_slot = [&](int64_t q, size_t c) {
    return scratch.data() + slot * ((q % 2) * children.size() + c);
  };
  uint8_t* const accumulators = scratch.data() + slot * 2 * children.size();

  // Messages after the buffers they use (see PeerMessage).
  std::vector<PeerMessage> recvs(2 * children.size());
  MessageWindow sends(ctx, 1);
  uint8_t* base = static_cast<uint8_t*>(data);
  const int64_t segments = count == 0 ? 0 : (count + segment - 1) / segment;
  auto segment_range = [&](int64_t q) {
    const int64_t begin = q * segment;
    return std::make_pair(begin, std::min(segment, count - begin));
  };
  auto post_recvs = [&](int64_t q) {
    const size_t bytes = ByteOffset(segment_range(q).second, dtype);
    for (size_t c = 0; c < children.size(); ++c) {
      recvs[(q % 2) * children.size() + c] =
          ctx.Recv(children[c], recv_slot(q, c), bytes, 0, kWhat);
    }
  };

  if (segments > 0) post_recvs(0);
  for (int64_t q = 0; q < segments; ++q) {
    if (q + 1 < segments) post_recvs(q + 1);
    const auto [begin, m] = segment_range(q);
    uint8_t* mine = base + ByteOffset(begin, dtype);
    uint8_t* acc = mine;
    if (accumulates_apart) {
      acc = accumulators + (q % 2) * slot;
      std::memcpy(acc, mine, ByteOffset(m, dtype));
    }
    for (size_t c = 0; c < children.size(); ++c) {
      RETURN_IF_ERROR(ctx.Wait(recvs[(q % 2) * children.size() + c]));
      const absl::Status s = Reduce(acc, recv_slot(q, c), m, dtype, op);
      if (!s.ok()) return ctx.Fail(s);
    }
    if (parent >= 0) {
      // Capacity 1: the send of segment q-1 (from the other accumulator) is done before this one
      // is posted, so accumulator (q+1) % 2 is free when segment q+1 needs it.
      RETURN_IF_ERROR(sends.Add(ctx.Send(parent, acc, ByteOffset(m, dtype), 0, kWhat)));
    } else if (op == ReduceOp::kAvg) {
      const absl::Status s = FinishAvg(acc, m, dtype, n);
      if (!s.ok()) return ctx.Fail(s);
    }
  }
  return sends.WaitAll();
}

}  // namespace paddle
