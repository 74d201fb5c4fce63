// CollectiveCall descriptions.
#include "paddle/collective/backends/native/collective_call.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paddle {
namespace {

// Long count vectors (a 64-rank alltoallv) are cut to their ends in messages.
constexpr size_t kCountsShown = 8;

std::string Details(const CollectiveCall& call) {
  const std::string dtype(call.has_dtype ? DTypeName(call.dtype) : "");
  const std::string op(call.has_op ? ReduceOpName(call.op) : "");
  switch (call.kind) {
    case OpKind::kAllreduce:
      return absl::StrCat(dtype, " x ", call.count, ", ", op);
    case OpKind::kBroadcast:
      return absl::StrCat(dtype, " x ", call.count, ", root ", call.root);
    case OpKind::kReduce:
      return absl::StrCat(dtype, " x ", call.count, ", ", op, ", root ", call.root);
    case OpKind::kAllgather:
      return absl::StrCat(dtype, " x ", call.count, " per rank");
    case OpKind::kAllgatherv:
      return absl::StrCat(dtype, ", counts ", CountsToString(call.counts));
    case OpKind::kReduceScatter:
      return absl::StrCat(dtype, " x ", call.count, " per rank, ", op);
    case OpKind::kAlltoall:
      return absl::StrCat(dtype, " x ", call.count, " per block");
    case OpKind::kAlltoallv:
      return absl::StrCat(dtype, ", send counts ", CountsToString(call.counts), ", recv counts ",
                          CountsToString(call.recv_counts));
    case OpKind::kBarrier:
      return "";
    case OpKind::kSend:
      return absl::StrCat(dtype, " x ", call.count, " to rank ", call.root, ", tag ", call.tag);
    case OpKind::kRecv:
      return absl::StrCat(dtype, " x ", call.count, " from rank ", call.root, ", tag ", call.tag);
    case OpKind::kSplit:
      return absl::StrCat("ranks ", CountsToString(call.counts));
  }
  return "";
}

}  // namespace

std::string CountsToString(const std::vector<int64_t>& counts) {
  if (counts.size() <= kCountsShown) return absl::StrCat("[", absl::StrJoin(counts, ", "), "]");
  const size_t half = kCountsShown / 2;
  return absl::StrCat("[", absl::StrJoin(counts.begin(), counts.begin() + half, ", "), ", ... (",
                      counts.size() - kCountsShown, " more), ",
                      absl::StrJoin(counts.end() - half, counts.end(), ", "), "]");
}

std::string CollectiveCall::Describe(uint64_t seq) const {
  const std::string details = Details(*this);
  return absl::StrCat(OpKindName(kind), " #", seq, details.empty() ? "" : " (", details,
                      details.empty() ? "" : ")");
}

CallStamp CollectiveCall::Stamp(uint64_t seq) const {
  CallStamp stamp;
  stamp.seq = seq;
  stamp.kind = static_cast<uint8_t>(kind);
  if (has_dtype) stamp.dtype = static_cast<uint8_t>(dtype);
  if (has_op) stamp.op = static_cast<uint8_t>(op);
  stamp.root = root;
  switch (kind) {
    case OpKind::kAllgatherv:
      stamp.count = count;  // the whole output: the same on every rank
      stamp.counts_hash = HashCounts(counts);
      break;
    case OpKind::kAlltoallv:
      break;  // each rank's input differs; the pair counts are checked instead
    default:
      stamp.count = count;
  }
  return stamp;
}

std::string CollectiveCall::Describe() const {
  const std::string details = Details(*this);
  return absl::StrCat(OpKindName(kind), details.empty() ? "" : " (", details,
                      details.empty() ? "" : ")");
}

}  // namespace paddle
