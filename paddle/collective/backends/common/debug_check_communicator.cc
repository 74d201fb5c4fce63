// DebugCheckCommunicator: the check of Note [Collective debug checks] before every collective of
// any backend; see debug_check_communicator.h.
#include "paddle/collective/backends/common/debug_check_communicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/collective/backends/common/work_queue.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/transport/tcp/tcp_transport.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// The check channel is this layer's own, so any tag will do; the second round uses tag + 1.
constexpr uint64_t kCheckTag = 0;

absl::Duration TimeoutOf(const CallOptions& call, const CommunicatorOptions& options) {
  return call.timeout > absl::ZeroDuration() ? call.timeout : options.timeout;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> DebugCheckCommunicator::Wrap(
    std::unique_ptr<Communicator> inner, const CommunicatorOptions& options,
    CallChecks::TensorCheck accepts, std::string store_prefix) {
  TransportOptions channel_options;
  channel_options.rank = inner->rank();
  channel_options.world_size = inner->world_size();
  channel_options.store = options.store;
  channel_options.store_prefix = absl::StrCat(store_prefix, "/channel");
  channel_options.connect_timeout = options.connect_timeout;
  absl::StatusOr<std::unique_ptr<Transport>> channel = CreateTcpTransport(channel_options);
  if (!channel.ok()) {
    const absl::Status error =
        ErrorContext()
            .Rank(inner->rank(), inner->world_size())
            .Hint(
                "the debug checks (PADDLE_DEBUG_CHECKS) connect every pair of ranks over TCP "
                "beside the backend; every rank must create its communicator with them on")
            .Wrap(Annotate(channel.status(), "connecting the collective debug checks' channel"));
    inner->Abort(error);
    return error;
  }
  CommunicatorOptions wrapped = options;
  wrapped.rank = inner->rank();
  wrapped.world_size = inner->world_size();
  return std::unique_ptr<Communicator>(new DebugCheckCommunicator(
      std::move(inner), wrapped, std::move(accepts), std::move(store_prefix), *std::move(channel)));
}

DebugCheckCommunicator::DebugCheckCommunicator(std::unique_ptr<Communicator> inner,
                                               const CommunicatorOptions& options,
                                               CallChecks::TensorCheck accepts,
                                               std::string store_prefix,
                                               std::unique_ptr<Transport> channel)
    : channel_(std::move(channel)),
      exchange_(*channel_, kCheckTag),
      options_(options),
      checks_(options.rank, options.world_size, accepts),
      accepts_(std::move(accepts)),
      store_prefix_(std::move(store_prefix)),
      owner_(absl::StrCat("rank ", options.rank, "/", options.world_size)),
      inner_(std::move(inner)) {}

DebugCheckCommunicator::~DebugCheckCommunicator() {
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    in_flight_.clear();  // the caller's Works, not ours to keep alive
  }
  // The wrapped communicator first (it may wait for its pending operations); then the channel.
  inner_.reset();
}

void DebugCheckCommunicator::Break(const absl::Status& cause, bool abort_inner) {
  broken_.store(true);
  channel_->Abort(cause);
  if (abort_inner) inner_->Abort(cause);
}

std::shared_ptr<Work> DebugCheckCommunicator::Track(std::shared_ptr<Work> work) {
  std::lock_guard<std::mutex> lock(works_mu_);
  ForgetCompletedLocked();
  in_flight_.push_back(work);
  return work;
}

void DebugCheckCommunicator::ForgetCompletedLocked() {
  auto done = std::remove_if(in_flight_.begin(), in_flight_.end(),
                             [this](const std::shared_ptr<Work>& work) {
                               if (!work->IsCompleted()) return false;
                               const absl::Status s = work->status();
                               // Argument errors and disagreements leave a communicator usable;
                               // every other failure poisoned it.
                               if (!s.ok() && !absl::IsInvalidArgument(s) && inner_failure_.ok()) {
                                 inner_failure_ = s;
                               }
                               return true;
                             });
  in_flight_.erase(done, in_flight_.end());
}

bool DebugCheckCommunicator::InnerPoisoned() {
  if (broken_.load()) return true;
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    ForgetCompletedLocked();
    failure = inner_failure_;
  }
  if (failure.ok()) return false;
  Break(failure, /*abort_inner=*/false);
  return true;
}

// Note [Debug-check sequence numbers]
// The backends fold the sequence number into their always-on stamps (Note [Agreement check]), so
// every rank's backend must see the same calls: a call reaches the backend on every rank or on
// none. It does when the ranks agree (all with valid arguments, or all rejected alike, which the
// backend then reports itself) and not after a disagreement, not even on a rank whose own
// arguments were wrong (this layer words that error as the backends do). A disagreement uses no
// sequence number, so this layer numbers calls as the native backend does: every call that
// reached it, rejected ones and Split included.
absl::Status DebugCheckCommunicator::Check(const CollectiveCall& call, const absl::Status& args,
                                           absl::Duration timeout, uint64_t* seq) {
  *seq = next_seq_;
  if (InnerPoisoned()) {  // the backend fails the call at once
    ++next_seq_;
    return absl::OkStatus();
  }
  absl::Status s = CheckCallAcrossRanks(exchange_, call, *seq, /*call_valid=*/args.ok(),
                                        Deadline::After(timeout));
  if (s.ok()) {
    ++next_seq_;
    return s;
  }
  if (!absl::IsInvalidArgument(s)) {
    // The check channel failed: Note [Communicator failure].
    Break(Annotate(s, call.Describe(*seq)), /*abort_inner=*/true);
  }
  if (!args.ok()) {
    return ErrorContext()
        .Rank(rank(), world_size())
        .Op(OpKindName(call.kind), static_cast<int64_t>(*seq))
        .Wrap(Annotate(args, call.Describe(*seq)));
  }
  return Annotate(s, call.Describe(*seq));
}

std::shared_ptr<Work> DebugCheckCommunicator::CheckThenForward(
    const CollectiveCall& call, const absl::Status& args, const CallOptions& options,
    absl::FunctionRef<std::shared_ptr<Work>()> forward) {
  if (shut_down_) return forward();  // refused by the wrapped communicator (Shutdown)
  std::lock_guard<std::mutex> lock(check_mu_);
  uint64_t seq = 0;
  const absl::Status verdict = Check(call, args, TimeoutOf(options, options_), &seq);
  if (verdict.ok()) return Track(forward());
  auto work = std::make_shared<QueuedWork>(call.Describe(seq), seq, owner_);
  work->Complete(verdict);
  return work;
}

std::shared_ptr<Work> DebugCheckCommunicator::Allreduce(Tensor tensor, ReduceOp op,
                                                        CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allreduce(tensor, op, &args);
  return CheckThenForward(what, args, call, [&] { return inner_->Allreduce(tensor, op, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Broadcast(Tensor tensor, int root, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Broadcast(tensor, root, &args);
  return CheckThenForward(what, args, call, [&] { return inner_->Broadcast(tensor, root, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Reduce(Tensor tensor, int root, ReduceOp op,
                                                     CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Reduce(tensor, root, op, &args);
  return CheckThenForward(what, args, call, [&] { return inner_->Reduce(tensor, root, op, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Allgather(Tensor input, Tensor output,
                                                        CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allgather(input, output, &args);
  return CheckThenForward(what, args, call, [&] { return inner_->Allgather(input, output, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Allgatherv(Tensor input, Tensor output,
                                                         std::vector<int64_t> counts,
                                                         CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allgatherv(input, output, counts, &args);
  return CheckThenForward(
      what, args, call, [&] { return inner_->Allgatherv(input, output, std::move(counts), call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::ReduceScatter(Tensor input, Tensor output,
                                                            ReduceOp op, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.ReduceScatter(input, output, op, &args);
  return CheckThenForward(what, args, call,
                          [&] { return inner_->ReduceScatter(input, output, op, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Alltoall(Tensor input, Tensor output,
                                                       CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Alltoall(input, output, &args);
  return CheckThenForward(what, args, call, [&] { return inner_->Alltoall(input, output, call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Alltoallv(Tensor input, Tensor output,
                                                        std::vector<int64_t> send_counts,
                                                        std::vector<int64_t> recv_counts,
                                                        CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Alltoallv(input, output, send_counts, recv_counts, &args);
  return CheckThenForward(what, args, call, [&] {
    return inner_->Alltoallv(input, output, std::move(send_counts), std::move(recv_counts), call);
  });
}

std::shared_ptr<Work> DebugCheckCommunicator::Barrier(CallOptions call) {
  return CheckThenForward(checks_.Barrier(), absl::OkStatus(), call,
                          [&] { return inner_->Barrier(call); });
}

std::shared_ptr<Work> DebugCheckCommunicator::Send(Tensor tensor, int dst, uint32_t tag,
                                                   CallOptions call) {
  return Track(inner_->Send(tensor, dst, tag, call));
}

std::shared_ptr<Work> DebugCheckCommunicator::Recv(Tensor tensor, int src, uint32_t tag,
                                                   CallOptions call) {
  return Track(inner_->Recv(tensor, src, tag, call));
}

absl::StatusOr<std::unique_ptr<Communicator>> DebugCheckCommunicator::Split(
    std::vector<int> ranks) {
  absl::Status args;
  const CollectiveCall what = checks_.Split(ranks, &args);
  if (shut_down_) return inner_->Split(std::move(ranks));  // refused (Shutdown)
  std::lock_guard<std::mutex> lock(check_mu_);
  uint64_t seq = 0;
  RETURN_IF_ERROR(Check(what, args, options_.timeout, &seq));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, inner_->Split(ranks));
  // Not in the new group, or alone in it: nothing to check.
  if (child == nullptr || child->world_size() == 1) return child;
  // Each split has its own channel: the rank list is part of the prefix, as in the native
  // backend's own split keys.
  return Wrap(std::move(child), options_, accepts_,
              absl::StrFormat("%s/split%d_%016x", store_prefix_, seq, HashCounts(what.counts)));
}

void DebugCheckCommunicator::Abort(const absl::Status& cause) {
  const absl::Status status = cause.ok() ? absl::AbortedError("no cause given") : cause;
  // The wrapped communicator words the cause (Note [Communicator failure]); a check blocked on
  // another thread fails at once with it too.
  broken_.store(true);
  inner_->Abort(status);
  channel_->Abort(status);
}

}  // namespace paddle
