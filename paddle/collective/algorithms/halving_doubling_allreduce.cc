// Halving-doubling allreduce (Rabenseifner's algorithm).
//
// Protocol (n ranks; p2, rem and the member numbering of PowerOfTwoGroup; the buffer cut into p2
// blocks differing by at most one element; member m ends owning block m):
//   0. fold (step 0, only when n is not a power of two): each even rank r < 2*rem sends its whole
//      buffer to r+1, which reduces it into its own; the even ranks sit out steps 1-2;
//   1. reduce-scatter by recursive halving (steps 1..log2(p2)): with the working range [lo, hi)
//      of blocks initially all p2, for d = p2/2, p2/4, ..., 1 member m pairs with member m XOR d,
//      keeps the half of its range on its own side of bit d (the upper half if m has bit d set),
//      sends the other half to the partner and reduces the partner's copy of the kept half into
//      its own. Each round halves the range and doubles the number of contributions in it; at the
//      end member m holds block m reduced over all members (for kAvg, divided by n now, once);
//   2. allgather by recursive doubling (steps log2(p2)+1..2*log2(p2)): for d = 1, 2, ..., p2/2
//      member m sends the 2^k blocks it has to member m XOR d and receives the partner's 2^k
//      blocks in place, doubling its range until it holds every block;
//   3. unfold (last step): each odd rank r < 2*rem sends the whole result to r-1.
// Buffers larger than p2 * ctx.piece_bytes() go through this protocol one segment at a time, which
// bounds the scratch memory (half a segment) and keeps per-message sizes near the piece size.
// Bytes on the wire per member, buffer of N bytes: (p2-1)/p2 * N in step 1 and again in step 2,
// i.e. 2(p2-1)/p2 * N, in 2*log2(p2) messages; a rank that folds in also receives and sends N for
// steps 0 and 3, a folded-out rank sends N and receives N and nothing else.
#include "paddle/collective/algorithms/halving_doubling_allreduce.h"

#include <algorithm>
#include <vector>

#include "paddle/collective/algorithms/partition.h"
#include "paddle/collective/algorithms/power_of_two_group.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kFold[] = "halving-doubling fold";
constexpr char kHalving[] = "halving-doubling reduce-scatter";
constexpr char kDoubling[] = "halving-doubling allgather";
constexpr char kUnfold[] = "halving-doubling unfold";

}  // namespace

absl::Status HalvingDoublingAllreduce(const AlgorithmContext& ctx, void* data, int64_t count,
                                      DType dtype, ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1 || count == 0) return absl::OkStatus();
  const PowerOfTwoGroup group(r, n);
  const int p2 = group.size();
  const int rounds = group.rounds();
  const uint32_t unfold_step = static_cast<uint32_t>(2 * rounds + 1);
  const int64_t piece_elements =
      std::max<int64_t>(1, static_cast<int64_t>(ctx.piece_bytes() / DTypeSize(dtype)));
  const int64_t segment = piece_elements * p2;
  const int64_t largest = std::min(segment, count);
  // The largest kept half: the first p2/2 blocks, which get the extra elements. The fold needs a
  // whole segment.
  const int64_t scratch_elements = group.folds_in() ? largest : (largest + p2) / 2;
  uint8_t* const scratch = ctx.Scratch(ByteOffset(scratch_elements, dtype));  // outlives messages

  for (int64_t begin = 0; begin < count; begin += segment) {
    const int64_t m = std::min(segment, count - begin);
    uint8_t* x = static_cast<uint8_t*>(data) + ByteOffset(begin, dtype);
    // Blocks [lo, hi) of this segment as (byte address, bytes).
    auto blocks = [&](int lo, int hi) {
      const int64_t first = EvenPart(m, p2, lo).offset;
      const int64_t end = hi == p2 ? m : EvenPart(m, p2, hi).offset;
      return std::make_pair(x + ByteOffset(first, dtype), ByteOffset(end - first, dtype));
    };
    auto reduce_scratch = [&](uint8_t* into, size_t bytes) -> absl::Status {
      const absl::Status s =
          Reduce(into, scratch, static_cast<int64_t>(bytes / DTypeSize(dtype)), dtype, op);
      return s.ok() ? s : ctx.Fail(s);
    };
    const size_t all_bytes = ByteOffset(m, dtype);

    if (group.folded_out()) {
      PeerMessage send = ctx.Send(group.fold_partner(), x, all_bytes, 0, kFold);
      RETURN_IF_ERROR(ctx.Wait(send));
    } else {
      if (group.folds_in()) {
        PeerMessage recv = ctx.Recv(group.fold_partner(), scratch, all_bytes, 0, kFold);
        RETURN_IF_ERROR(ctx.Wait(recv));
        RETURN_IF_ERROR(reduce_scratch(x, all_bytes));
      }
      const int me = group.member();
      int lo = 0;
      int hi = p2;
      uint32_t step = 1;
      for (int d = p2 / 2; d >= 1; d /= 2, ++step) {
        const int partner = group.RankOf(me ^ d);
        const int mid = lo + d;
        const bool upper = (me & d) != 0;
        const auto [keep, keep_bytes] = upper ? blocks(mid, hi) : blocks(lo, mid);
        const auto [give, give_bytes] = upper ? blocks(lo, mid) : blocks(mid, hi);
        PeerMessage recv = ctx.Recv(partner, scratch, keep_bytes, step, kHalving);
        PeerMessage send = ctx.Send(partner, give, give_bytes, step, kHalving);
        RETURN_IF_ERROR(ctx.Wait(recv));
        // The send reads the other half, so reducing into the kept half need not wait for it.
        RETURN_IF_ERROR(reduce_scratch(keep, keep_bytes));
        RETURN_IF_ERROR(ctx.Wait(send));
        if (upper) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      if (op == ReduceOp::kAvg) {
        const auto [mine, mine_bytes] = blocks(me, me + 1);
        const absl::Status s =
            FinishAvg(mine, static_cast<int64_t>(mine_bytes / DTypeSize(dtype)), dtype, n);
        if (!s.ok()) return ctx.Fail(s);
      }
      for (int d = 1; d < p2; d *= 2, ++step) {
        const int partner = group.RankOf(me ^ d);
        const int partner_lo = lo ^ d;  // lo is a multiple of d here
        const auto [theirs, theirs_bytes] = blocks(partner_lo, partner_lo + d);
        const auto [ours, ours_bytes] = blocks(lo, lo + d);
        PeerMessage recv = ctx.Recv(partner, theirs, theirs_bytes, step, kDoubling);
        PeerMessage send = ctx.Send(partner, ours, ours_bytes, step, kDoubling);
        RETURN_IF_ERROR(ctx.Wait(recv));
        RETURN_IF_ERROR(ctx.Wait(send));
        lo = std::min(lo, partner_lo);
      }
    }

    if (group.folds_in()) {
      PeerMessage send = ctx.Send(group.fold_partner(), x, all_bytes, unfold_step, kUnfold);
      RETURN_IF_ERROR(ctx.Wait(send));
    } else if (group.folded_out()) {
      PeerMessage recv = ctx.Recv(group.fold_partner(), x, all_bytes, unfold_step, kUnfold);
      RETURN_IF_ERROR(ctx.Wait(recv));  // already divided for kAvg by the member that sent it
    }
  }
  return absl::OkStatus();
}

}  // namespace paddle
