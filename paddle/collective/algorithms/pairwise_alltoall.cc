// Pairwise all-to-all(v).
//
// Protocol (n ranks, rank r):
//   0. copy block r of `in` to block r of `out` (no message);
//   steps s = 1 .. n-1:
//     1. post the receive of block r from rank (r-s) mod n into block (r-s) of `out`;
//     2. send block (r+s) of `in` to rank (r+s) mod n;
//     3. wait for both.
//   In step s rank r sends to r+s while r+s receives from (r+s)-s = r: each step pairs every
//   sender with exactly one receiver. Waiting per step keeps one block per direction in flight,
//   which is what limits contention; the step's receive is posted before its send so the data can
//   land in place.
// Bytes on the wire per rank: sum of send_counts but its own block sent, sum of recv_counts but
// its own block received ((n-1)/n of `in` / `out` for equal counts), in n-1 steps.
#include "paddle/collective/algorithms/pairwise_alltoall.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/algorithms/partition.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kWhat[] = "pairwise alltoall";

}  // namespace

absl::Status PairwiseAlltoallv(const AlgorithmContext& ctx, const void* in,
                               absl::Span<const int64_t> send_counts, void* out,
                               absl::Span<const int64_t> recv_counts, DType dtype) {
  RETURN_IF_ERROR(ctx.CheckCounts(send_counts, dtype));
  RETURN_IF_ERROR(ctx.CheckCounts(recv_counts, dtype));
  const int n = ctx.size();
  const int r = ctx.rank();
  const std::vector<int64_t> send_offsets = PrefixOffsets(send_counts);
  const std::vector<int64_t> recv_offsets = PrefixOffsets(recv_counts);
  const int64_t send_total = send_offsets.back() + send_counts.back();
  const int64_t recv_total = recv_offsets.back() + recv_counts.back();
  RETURN_IF_ERROR(ctx.CheckBuffer(in, send_total, dtype));
  RETURN_IF_ERROR(ctx.CheckBuffer(out, recv_total, dtype));
  if (send_counts[r] != recv_counts[r]) {
    return ctx.InvalidArgument(absl::StrCat("this rank sends itself ", send_counts[r],
                                            " elements but expects ", recv_counts[r]));
  }
  const uint8_t* src = static_cast<const uint8_t*>(in);
  uint8_t* dst = static_cast<uint8_t*>(out);
  if (send_counts[r] > 0) {
    std::memcpy(dst + ByteOffset(recv_offsets[r], dtype), src + ByteOffset(send_offsets[r], dtype),
                ByteOffset(send_counts[r], dtype));
  }
  for (int s = 1; s < n; ++s) {
    const int to = ModRank(r + s, n);
    const int from = ModRank(r - s, n);
    PeerMessage recv = ctx.Recv(from, dst + ByteOffset(recv_offsets[from], dtype),
                                ByteOffset(recv_counts[from], dtype), s, kWhat);
    PeerMessage send = ctx.Send(to, src + ByteOffset(send_offsets[to], dtype),
                                ByteOffset(send_counts[to], dtype), s, kWhat);
    RETURN_IF_ERROR(ctx.Wait(recv));
    RETURN_IF_ERROR(ctx.Wait(send));
  }
  return absl::OkStatus();
}

absl::Status PairwiseAlltoall(const AlgorithmContext& ctx, const void* in, void* out, int64_t count,
                              DType dtype) {
  if (count < 0) return ctx.InvalidArgument(absl::StrCat("negative element count ", count));
  const std::vector<int64_t> counts(static_cast<size_t>(ctx.size()), count);
  return PairwiseAlltoallv(ctx, in, counts, out, counts, dtype);
}

}  // namespace paddle
