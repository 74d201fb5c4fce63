// Tree allreduce by recursive doubling.
//
// Why recursive doubling and not a binomial reduce followed by a binomial broadcast: both move
// the whole buffer per round, but the reduce+broadcast pair needs 2*log2(n) rounds in sequence and
// recursive doubling log2(n) (+2 for the fold when n is not a power of two): for small buffers,
// where each round costs one network latency, that halves the time. Recursive doubling sends more
// bytes in total (every rank sends the full buffer every round), which is why the selector stops
// using it beyond small sizes.
//
// Protocol (n ranks; p2, rem and the member numbering of PowerOfTwoGroup):
//   0. fold (step 0, only when n is not a power of two): each even rank r < 2*rem sends its buffer
//      to r+1, which reduces it into its own;
//   1. rounds k = 0 .. log2(p2)-1 (step 1+k): member m exchanges its whole buffer with member
//      m XOR 2^k and reduces the partner's copy into its own. After round k each member holds the
//      reduction over the 2^(k+1) members that agree with it above bit k; after the last round,
//      over everyone;
//   2. unfold (step log2(p2)+1): each odd rank r < 2*rem sends the result to r-1;
//   3. kAvg: every rank divides its copy by n (the same input bits, so the same output bits).
// Partners combine in opposite orders (mine op theirs / theirs op mine); the kernels are
// commutative bit for bit (Note [Reduction semantics]), so all ranks end with the same bits.
// Buffers larger than ctx.piece_bytes() are run through this protocol one segment at a time, to
// bound the scratch memory to one segment.
// Bytes on the wire per rank, buffer of N bytes: members send N per round, log2(p2) * N in all,
// plus N more for a rank that folds in (the unfold); a folded-out rank sends N. Rounds:
// log2(n) when n is a power of two, floor(log2(n)) + 2 otherwise.
#include "paddle/collective/algorithms/tree_allreduce.h"

#include <algorithm>
#include <vector>

#include "paddle/collective/algorithms/power_of_two_group.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kFold[] = "recursive doubling fold";
constexpr char kExchange[] = "recursive doubling";
constexpr char kUnfold[] = "recursive doubling unfold";

}  // namespace

absl::Status TreeAllreduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           ReduceOp op) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return ctx.InvalidArgument(s.message());
  const int n = ctx.size();
  const int r = ctx.rank();
  if (n == 1 || count == 0) return absl::OkStatus();
  const PowerOfTwoGroup group(r, n);
  const uint32_t unfold_step = static_cast<uint32_t>(group.rounds()) + 1;
  const int64_t segment =
      std::max<int64_t>(1, static_cast<int64_t>(ctx.piece_bytes() / DTypeSize(dtype)));
  uint8_t* const scratch = ctx.Scratch(ByteOffset(std::min(segment, count), dtype));

  for (int64_t begin = 0; begin < count; begin += segment) {
    const int64_t m = std::min(segment, count - begin);
    uint8_t* x = static_cast<uint8_t*>(data) + ByteOffset(begin, dtype);
    const size_t bytes = ByteOffset(m, dtype);
    auto reduce_scratch = [&]() -> absl::Status {
      const absl::Status s = Reduce(x, scratch, m, dtype, op);
      return s.ok() ? s : ctx.Fail(s);
    };

    if (group.folded_out()) {
      PeerMessage send = ctx.Send(group.fold_partner(), x, bytes, 0, kFold);
      RETURN_IF_ERROR(ctx.Wait(send));
    } else if (group.folds_in()) {
      PeerMessage recv = ctx.Recv(group.fold_partner(), scratch, bytes, 0, kFold);
      RETURN_IF_ERROR(ctx.Wait(recv));
      RETURN_IF_ERROR(reduce_scratch());
    }

    if (!group.folded_out()) {
      for (int k = 0; k < group.rounds(); ++k) {
        const int partner = group.RankOf(group.member() ^ (1 << k));
        PeerMessage recv = ctx.Recv(partner, scratch, bytes, 1 + k, kExchange);
        PeerMessage send = ctx.Send(partner, x, bytes, 1 + k, kExchange);
        RETURN_IF_ERROR(ctx.Wait(recv));
        RETURN_IF_ERROR(ctx.Wait(send));  // `x` is read by the send until then
        RETURN_IF_ERROR(reduce_scratch());
      }
    }

    if (group.folds_in()) {
      PeerMessage send = ctx.Send(group.fold_partner(), x, bytes, unfold_step, kUnfold);
      RETURN_IF_ERROR(ctx.Wait(send));
    } else if (group.folded_out()) {
      PeerMessage recv = ctx.Recv(group.fold_partner(), x, bytes, unfold_step, kUnfold);
      RETURN_IF_ERROR(ctx.Wait(recv));
    }

    if (op == ReduceOp::kAvg) {
      const absl::Status s = FinishAvg(x, m, dtype, n);
      if (!s.ok()) return ctx.Fail(s);
    }
  }
  return absl::OkStatus();
}

}  // namespace paddle
