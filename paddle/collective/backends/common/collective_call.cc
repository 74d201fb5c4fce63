// CollectiveCall descriptions and the argument checks of every backend (CallChecks).
#include "paddle/collective/backends/common/collective_call.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/argument_checks.h"
#include "paddle/core/status.h"

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

// The fields of a call that moves `count` elements of `tensor`'s dtype.
CollectiveCall TensorCall(OpKind kind, const Tensor& tensor, int64_t count) {
  CollectiveCall call;
  call.kind = kind;
  call.has_dtype = true;
  call.dtype = tensor.dtype();
  call.count = count;
  call.bytes = static_cast<int64_t>(tensor.nbytes());
  return call;
}

CollectiveCall WithOp(CollectiveCall call, ReduceOp op) {
  call.has_op = true;
  call.op = op;
  return call;
}

}  // namespace

absl::Status CallChecks::CheckPair(const Tensor& input, const Tensor& output) const {
  RETURN_IF_ERROR(check_tensor_(input, "input"));
  RETURN_IF_ERROR(check_tensor_(output, "output"));
  return CheckSameDType(input, "input", output, "output");
}

CollectiveCall CallChecks::Allreduce(const Tensor& tensor, ReduceOp op, absl::Status* args) const {
  *args = check_tensor_(tensor, "tensor");
  if (args->ok()) *args = CheckReduction(tensor.dtype(), op);
  return WithOp(TensorCall(OpKind::kAllreduce, tensor, tensor.numel()), op);
}

CollectiveCall CallChecks::Broadcast(const Tensor& tensor, int root, absl::Status* args) const {
  *args = check_tensor_(tensor, "tensor");
  if (args->ok()) *args = CheckRankArgument(root, size_, "root");
  CollectiveCall call = TensorCall(OpKind::kBroadcast, tensor, tensor.numel());
  call.root = root;
  return call;
}

CollectiveCall CallChecks::Reduce(const Tensor& tensor, int root, ReduceOp op,
                                  absl::Status* args) const {
  *args = check_tensor_(tensor, "tensor");
  if (args->ok()) *args = CheckRankArgument(root, size_, "root");
  if (args->ok()) *args = CheckReduction(tensor.dtype(), op);
  CollectiveCall call = WithOp(TensorCall(OpKind::kReduce, tensor, tensor.numel()), op);
  call.root = root;
  return call;
}

size_t CallChecks::BlockOffset(const Tensor& input, const std::vector<int64_t>* counts) const {
  if (counts == nullptr) return static_cast<size_t>(rank_) * input.nbytes();
  int64_t offset = 0;
  for (int r = 0; r < rank_; ++r) offset += (*counts)[r];
  return static_cast<size_t>(offset) * input.element_size();
}

CollectiveCall CallChecks::Allgather(const Tensor& input, const Tensor& output,
                                     absl::Status* args) const {
  *args = CheckPair(input, output);
  if (args->ok()) {
    *args = CheckNumel(output, "output", size_ * input.numel(),
                       absl::StrCat("world size ", size_, " x the input's ", input.numel()));
  }
  // In place is allowed: the input may be exactly this rank's block of the output.
  if (args->ok() && static_cast<char*>(input.data()) !=
                        static_cast<char*>(output.data()) + BlockOffset(input, nullptr)) {
    *args = CheckDisjoint(input, "input", output, "output");
  }
  CollectiveCall call = TensorCall(OpKind::kAllgather, input, input.numel());
  call.bytes = static_cast<int64_t>(output.nbytes());
  return call;
}

CollectiveCall CallChecks::Allgatherv(const Tensor& input, const Tensor& output,
                                      const std::vector<int64_t>& counts,
                                      absl::Status* args) const {
  int64_t total = 0;
  *args = CheckPair(input, output);
  if (args->ok()) *args = CheckCountsArgument(counts, size_, "counts", &total);
  if (args->ok()) {
    *args = CheckNumel(input, "input", counts[rank_], absl::StrCat("counts[", rank_, "]"));
  }
  if (args->ok()) *args = CheckNumel(output, "output", total, "the sum of counts");
  if (args->ok() && static_cast<char*>(input.data()) !=
                        static_cast<char*>(output.data()) + BlockOffset(input, &counts)) {
    *args = CheckDisjoint(input, "input", output, "output");
  }
  CollectiveCall call = TensorCall(OpKind::kAllgatherv, input, total);
  call.counts = counts;
  call.bytes = static_cast<int64_t>(output.nbytes());
  return call;
}

CollectiveCall CallChecks::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                         absl::Status* args) const {
  *args = CheckPair(input, output);
  if (args->ok()) {
    *args = CheckNumel(input, "input", size_ * output.numel(),
                       absl::StrCat("world size ", size_, " x the output's ", output.numel()));
  }
  if (args->ok()) *args = CheckReduction(input.dtype(), op);
  CollectiveCall call = WithOp(TensorCall(OpKind::kReduceScatter, input, output.numel()), op);
  return call;
}

CollectiveCall CallChecks::Alltoall(const Tensor& input, const Tensor& output,
                                    absl::Status* args) const {
  *args = CheckPair(input, output);
  if (args->ok() && input.numel() % size_ != 0) {
    *args = absl::InvalidArgumentError(
        absl::StrCat("input ", input.ToString(), " has ", input.numel(),
                     " elements, not a multiple of the world size ", size_,
                     " (alltoall sends every rank an equal block)"));
  }
  if (args->ok()) *args = CheckNumel(output, "output", input.numel(), "as many as the input");
  if (args->ok()) *args = CheckDisjoint(input, "input", output, "output");
  return TensorCall(OpKind::kAlltoall, input, input.numel() / size_);
}

CollectiveCall CallChecks::Alltoallv(const Tensor& input, const Tensor& output,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts,
                                     absl::Status* args) const {
  int64_t send_total = 0;
  int64_t recv_total = 0;
  *args = CheckPair(input, output);
  if (args->ok()) *args = CheckCountsArgument(send_counts, size_, "send_counts", &send_total);
  if (args->ok()) *args = CheckCountsArgument(recv_counts, size_, "recv_counts", &recv_total);
  if (args->ok()) *args = CheckNumel(input, "input", send_total, "the sum of send_counts");
  if (args->ok()) *args = CheckNumel(output, "output", recv_total, "the sum of recv_counts");
  if (args->ok() && send_counts[rank_] != recv_counts[rank_]) {
    *args = absl::InvalidArgumentError(
        absl::StrCat("send_counts[", rank_, "] = ", send_counts[rank_], " but recv_counts[", rank_,
                     "] = ", recv_counts[rank_],
                     ": the block this rank sends itself must be what it expects from itself"));
  }
  if (args->ok()) *args = CheckDisjoint(input, "input", output, "output");
  CollectiveCall call = TensorCall(OpKind::kAlltoallv, input, input.numel());
  call.counts = send_counts;
  call.recv_counts = recv_counts;
  return call;
}

CollectiveCall CallChecks::Barrier() const {
  CollectiveCall call;
  call.kind = OpKind::kBarrier;
  return call;
}

CollectiveCall CallChecks::PointToPoint(bool is_send, const Tensor& tensor, int peer, uint32_t tag,
                                        absl::Status* args) const {
  *args = check_tensor_(tensor, "tensor");
  if (args->ok()) {
    *args = CheckRankArgument(peer, size_, is_send ? "destination rank" : "source rank");
  }
  if (args->ok() && peer == rank_) {
    *args = absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer, is_send ? " cannot send to itself" : " cannot receive from itself"));
  }
  CollectiveCall call = TensorCall(is_send ? OpKind::kSend : OpKind::kRecv, tensor, tensor.numel());
  call.root = peer;
  call.tag = tag;
  return call;
}

CollectiveCall CallChecks::Split(const std::vector<int>& ranks, absl::Status* args) const {
  CollectiveCall call;
  call.kind = OpKind::kSplit;
  call.count = static_cast<int64_t>(ranks.size());
  call.counts.assign(ranks.begin(), ranks.end());
  *args = absl::OkStatus();
  if (ranks.empty()) *args = absl::InvalidArgumentError("the rank list is empty");
  for (size_t i = 0; args->ok() && i < ranks.size(); ++i) {
    *args = CheckRankArgument(ranks[i], size_, absl::StrCat("ranks[", i, "]"));
    if (args->ok() && i > 0 && ranks[i] <= ranks[i - 1]) {
      *args = absl::InvalidArgumentError(
          absl::StrCat("ranks ", CountsToString(call.counts), " are not sorted and unique"));
    }
  }
  return call;
}

absl::Status ShutDownError(int rank, int world_size, absl::string_view op, int64_t seq,
                           absl::string_view what) {
  return ErrorContext()
      .Rank(rank, world_size)
      .Op(op, seq)
      .Wrap(absl::FailedPreconditionError(
          absl::StrCat(what, what.empty() ? "" : ": ",
                       "the communicator was shut down (Shutdown, destroy_process_group); "
                       "create a new one for more calls")));
}

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
