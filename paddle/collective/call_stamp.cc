// CallStamp descriptions and comparison; see call_stamp.h.
#include "paddle/collective/call_stamp.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {

namespace {

constexpr OpKind kAllKinds[] = {
    OpKind::kAllreduce,  OpKind::kBroadcast,     OpKind::kReduce,   OpKind::kAllgather,
    OpKind::kAllgatherv, OpKind::kReduceScatter, OpKind::kAlltoall, OpKind::kAlltoallv,
    OpKind::kBarrier,    OpKind::kSend,          OpKind::kRecv,     OpKind::kSplit,
};

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kAllgatherv:
      return "allgatherv";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAlltoall:
      return "alltoall";
    case OpKind::kAlltoallv:
      return "alltoallv";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kSplit:
      return "split";
  }
  return "invalid";
}

absl::optional<OpKind> OpKindFromName(absl::string_view name) {
  for (OpKind kind : kAllKinds) {
    if (OpKindName(kind) == name) return kind;
  }
  return absl::nullopt;
}

uint64_t HashCounts(absl::Span<const int64_t> counts) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t c : counts) h = (h ^ static_cast<uint64_t>(c)) * 1099511628211ull;
  return h;
}

std::string DescribeStamp(const CallStamp& stamp) {
  std::string out =
      absl::StrCat(OpKindName(static_cast<OpKind>(stamp.kind)), " #", stamp.seq, " (");
  if (stamp.dtype != CallStamp::kNone) {
    absl::StrAppend(&out, DTypeName(static_cast<DType>(stamp.dtype)));
  } else {
    absl::StrAppend(&out, "no tensor");
  }
  if (stamp.count != 0 || stamp.send_count < 0) absl::StrAppend(&out, " x ", stamp.count);
  if (stamp.op != CallStamp::kNone) {
    absl::StrAppend(&out, ", ", ReduceOpName(static_cast<ReduceOp>(stamp.op)));
  }
  if (stamp.root >= 0) absl::StrAppend(&out, ", root ", stamp.root);
  if (stamp.counts_hash != 0) absl::StrAppend(&out, ", counts hash ", stamp.counts_hash);
  if (stamp.send_count >= 0) {
    absl::StrAppend(&out, ", sends ", stamp.send_count, ", expects ", stamp.recv_count);
  }
  return absl::StrCat(out, ")");
}

bool StampsAgree(const CallStamp& mine, const CallStamp& theirs) {
  return mine.seq == theirs.seq && mine.kind == theirs.kind && mine.dtype == theirs.dtype &&
         mine.op == theirs.op && mine.root == theirs.root && mine.count == theirs.count &&
         mine.counts_hash == theirs.counts_hash && mine.send_count == theirs.recv_count &&
         mine.recv_count == theirs.send_count;
}

absl::Status StampMismatchError(int rank, int world_size, int peer, absl::string_view peer_address,
                                const CallStamp& mine, const CallStamp& theirs,
                                absl::string_view where) {
  std::string pair;
  if (mine.send_count >= 0 || theirs.send_count >= 0) {
    pair = absl::StrCat(" (rank ", rank, " sends ", mine.send_count, " elements to rank ", peer,
                        ", which expects ", theirs.recv_count, "; rank ", peer, " sends ",
                        theirs.send_count, ", rank ", rank, " expects ", mine.recv_count, ")");
  }
  return MarkRanksDisagree(
      ErrorContext()
          .Rank(rank, world_size)
          .Peer(peer, peer_address)
          .Op(OpKindName(static_cast<OpKind>(mine.kind)), static_cast<int64_t>(mine.seq))
          .Hint(
              "every rank must call the same collectives in the same order with the same dtype, "
              "element count, root and reduce op; PADDLE_DEBUG_CHECKS=1 compares all ranks' calls "
              "before each collective and lists them")
          .Wrap(absl::InvalidArgumentError(absl::StrCat(
              "ranks called different collectives (Note [Agreement check], found by the ", where,
              "): rank ", rank, " called ", DescribeStamp(mine), " but rank ", peer, " called ",
              DescribeStamp(theirs), pair))));
}

}  // namespace paddle
