// NativeCommunicator: the Communicator of the native backend; see native_communicator.h.
//
// Each call (1) describes itself as a CollectiveCall, (2) checks its arguments on the caller's
// thread, (3) takes the next sequence number and (4) queues a task on the WorkQueue, all under
// one lock so that sequence numbers follow the queue order. The task, on the queue thread, makes
// the operation's Deadline and AlgorithmContext (with the call's stamp, Note [Agreement check])
// and runs the algorithm. Argument errors fail the returned Work at once and do not poison the
// communicator; the sequence number is used up all the same, so that ranks that all reject the
// same call stay in step.
//
// Note [Native communicator tags]
// Algorithms own the tags without bit 63 (Note [Message tags]). The communicator's own messages
// set bit 63 (as do the contexts' stamps, kAgreementTag = bit 63 | 1, Note [Agreement check]):
// point-to-point messages also set bit 62 and carry the caller's 32-bit tag, so Send/Recv pairs
// match on (peer, tag) in order, whatever the collectives around them do.
#include "paddle/collective/backends/native/native_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/algorithms/algorithm_selector.h"
#include "paddle/collective/algorithms/dissemination_barrier.h"
#include "paddle/collective/algorithms/pairwise_alltoall.h"
#include "paddle/collective/algorithms/ring_allgather.h"
#include "paddle/collective/algorithms/ring_reduce_scatter.h"
#include "paddle/collective/algorithms/tree_reduce.h"
#include "paddle/collective/argument_checks.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/backends/common/communicator_operations.h"
#include "paddle/collective/backends/common/work_queue.h"
#include "paddle/collective/backends/native/communicator_settings.h"
#include "paddle/collective/backends/native/cuda_support.h"
#include "paddle/collective/backends/native/topology.h"
#include "paddle/collective/intranode/node_workspace.h"
#include "paddle/collective/intranode/shm_collectives.h"
#include "paddle/collective/store/prefix_store.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/shm/host_identity.h"
#include "paddle/collective/transport/shm/shm_transport.h"
#include "paddle/collective/transport/tcp/tcp_transport.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/collective/transport/ucx/ucx_transport.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Note [Native communicator tags].
constexpr uint64_t kControlTagBit = uint64_t{1} << 63;
constexpr uint64_t kPointToPointTagBit = uint64_t{1} << 62;
uint64_t PointToPointTag(uint32_t tag) { return kControlTagBit | kPointToPointTagBit | tag; }

// How long an abandoned point-to-point request may take to fail after the transport was aborted.
constexpr absl::Duration kDrainTimeout = absl::Seconds(30);

absl::Status CheckOptions(const CommunicatorOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "native communicator: rank ", options.rank, " and world size ", options.world_size,
        " do not fit: need world_size >= 1 and 0 <= rank < world_size"));
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("native communicator of rank ", options.rank, "/", options.world_size,
                     ": CommunicatorOptions.store is null; the ranks find each other through it"));
  }
  if (options.timeout <= absl::ZeroDuration() || options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("native communicator of rank ", options.rank, "/", options.world_size,
                     ": timeout (", absl::FormatDuration(options.timeout),
                     ") and connect_timeout (", absl::FormatDuration(options.connect_timeout),
                     ") must be positive; use absl::InfiniteDuration() for no limit"));
  }
  return absl::OkStatus();
}

// FNV-1a of a rank list, for split store prefixes: the same in every process.
uint64_t HashRanks(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(r) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

class NativeCommunicator final : public Communicator {
 public:
  NativeCommunicator(const CommunicatorOptions& options, Settings settings, Topology topology,
                     std::unique_ptr<Transport> transport, std::unique_ptr<NodeWorkspace> workspace)
      : options_(options),
        settings_(std::move(settings)),
        owner_(absl::StrCat("rank ", options.rank, "/", options.world_size)),
        topology_(std::move(topology)),
        transport_(std::move(transport)),
        workspace_(std::move(workspace)),
        cuda_(CudaSupportOptions{options.rank, options.world_size, options.store,
                                 options.store_prefix, topology_.num_hosts,
                                 options.connect_timeout}),
        checks_(options.rank, options.world_size,
                [](const Tensor& t, absl::string_view name) { return CheckTensor(t, name, true); }),
        ring_stamps_(*transport_, options.timeout),
        queue_(options.rank, options.world_size, [this](const absl::Status& cause) {
          transport_->Abort(cause);
          if (workspace_ != nullptr) workspace_->Abort(cause);
        }) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  Backend backend() const override { return Backend::kNative; }
  absl::Status Shutdown() override;

  PADDLE_COMMUNICATOR_OPERATIONS;

 private:
  // What a task runs once its context exists.
  using Body = std::function<absl::Status(const AlgorithmContext& ctx)>;

  // Steps (3) and (4) of the file comment: `arguments` is the result of step (2).
  // `cuda` (from PrepareCuda) runs `body` between staging copies, or the IPC path instead.
  std::shared_ptr<Work> Submit(const CollectiveCall& call, const absl::Status& arguments,
                               const CallOptions& call_options, std::shared_ptr<CudaCall> cuda,
                               Body body);
  // On the queue thread: the deadline and context, then `body`.
  WorkQueue::TaskResult RunTask(const CollectiveCall& call, uint64_t seq, absl::Duration timeout,
                                const Body& body, const std::shared_ptr<CudaCall>& cuda);
  // CUDA tensors (cuda_support.h); an error other than an argument's also poisons.
  absl::Status PrepareCuda(const CollectiveCall& call, const std::vector<CudaCallTensor>& tensors,
                           std::shared_ptr<CudaCall>* cuda) {
    absl::Status s = cuda_.Prepare(call.kind, call.op, call.root, tensors, cuda);
    if (!s.ok() && !absl::IsInvalidArgument(s)) Abort(s);
    return s;
  }
  absl::Status PrepareCuda(const CollectiveCall& call, Tensor* input, Tensor* output,
                           std::shared_ptr<CudaCall>* cuda) {
    return PrepareCuda(call, {{input, CudaTensorRole::kInput}, {output, CudaTensorRole::kOutput}},
                       cuda);
  }
  // Posts one point-to-point message and waits for it within ctx's deadline.
  // Send (is_send) or Recv with `peer`: the arguments checked, then queued.
  std::shared_ptr<Work> SubmitPointToPoint(bool is_send, const Tensor& tensor, int peer,
                                           uint32_t tag, const CallOptions& call_options);
  absl::Status PointToPoint(const AlgorithmContext& ctx, bool is_send, const Tensor& tensor,
                            int peer, uint32_t tag);
  // Note [Transport choice]: whether this call runs on the node workspace. Only with the
  // algorithm table (PADDLE_ALGO unset), and all ranks on this host (`whole_group_local`) or,
  // for the hierarchical allreduce, the same number on every host.
  bool UseWorkspace(bool hierarchical_ok) const {
    if (workspace_ == nullptr || settings_.selector.forced().has_value()) return false;
    if (topology_.num_hosts == 1) return true;
    return hierarchical_ok && topology_.uniform;
  }
  // Creates this rank's communicator of the split group (on the queue thread).
  absl::StatusOr<std::unique_ptr<Communicator>> CreateSplit(const std::vector<int>& ranks,
                                                            uint64_t seq);

  const CommunicatorOptions options_;
  const Settings settings_;
  const std::string owner_;  // "rank 1/4"
  const Topology topology_;
  std::unique_ptr<Transport> transport_;
  // The ranks of this host share it (Note [Transport choice]); null when alone on the host or
  // with transport=tcp.
  std::unique_ptr<NodeWorkspace> workspace_;
  CudaSupport cuda_;
  const CallChecks checks_;
  // Note [Ring stamp]: destroyed after the queue's thread is joined and before the transport,
  // sending the stamps it owes and waiting for those still on their way.
  RingStamps ring_stamps_;

  std::mutex call_mu_;
  uint64_t next_seq_ = 1;      // guarded by call_mu_; collectives
  uint64_t next_p2p_seq_ = 1;  // guarded by call_mu_; Send and Recv
  bool shut_down_ = false;     // guarded by call_mu_; later calls fail
  // One Shutdown at a time; its verdict, for the next one.
  std::mutex shutdown_mu_;
  std::optional<absl::Status> shutdown_status_;  // guarded by shutdown_mu_

  // Scratch memory of the algorithms, kept between operations (one runs at a time).
  const std::shared_ptr<ScratchArena> scratch_ = std::make_shared<ScratchArena>();
  // ReduceScatter's copy of its input, kept the same way: a fresh buffer per call page-faults the
  // whole input in again, which cost more than the ring itself over TCP (docs/performance-notes.md,
  // "Scratch arena").
  ScratchArena input_copy_;
  // Last: its thread runs tasks that use everything above, and is joined first.
  WorkQueue queue_;
};

std::shared_ptr<Work> NativeCommunicator::Submit(const CollectiveCall& call,
                                                 const absl::Status& arguments,
                                                 const CallOptions& call_options,
                                                 std::shared_ptr<CudaCall> cuda, Body body) {
  const bool p2p = IsPointToPoint(call.kind);
  const absl::Duration timeout =
      call_options.timeout > absl::ZeroDuration() ? call_options.timeout : options_.timeout;
  std::lock_guard<std::mutex> lock(call_mu_);
  const uint64_t seq = p2p ? next_p2p_seq_++ : next_seq_++;
  auto work = std::make_shared<QueuedWork>(call.Describe(seq), seq, owner_, queue_.waiter_hook());
  if (shut_down_) {
    work->Complete(ShutDownError(rank(), world_size(), OpKindName(call.kind),
                                 static_cast<int64_t>(seq), work->Describe()));
    return work;
  }
  if (!arguments.ok()) {
    work->Complete(ErrorContext()
                       .Rank(rank(), world_size())
                       .Op(OpKindName(call.kind), static_cast<int64_t>(seq))
                       .Wrap(Annotate(arguments, work->Describe())));
    return work;
  }

  queue_.Enqueue(work, [this, call, seq, timeout, body = std::move(body), cuda = std::move(cuda)] {
    return RunTask(call, seq, timeout, body, cuda);
  });
  return work;
}

absl::Status NativeCommunicator::Shutdown() {
  std::lock_guard<std::mutex> shutdown_lock(shutdown_mu_);
  if (shutdown_status_.has_value()) return *shutdown_status_;
  // Note [Ring stamp]: the stamps still on their way are compared after every queued operation,
  // on the queue (one operation at a time), so the last call's mismatch is returned, not logged.
  auto verdict = std::make_shared<absl::Status>();
  auto fence = std::make_shared<QueuedWork>("shutdown", 0, owner_, queue_.waiter_hook());
  {
    std::lock_guard<std::mutex> lock(call_mu_);
    shut_down_ = true;
    queue_.Enqueue(fence, [this, verdict]() -> WorkQueue::TaskResult {
      *verdict = ring_stamps_.Close();
      return {absl::OkStatus(), /*poison=*/false};  // poisoned below, with the bare verdict
    });
  }
  fence->Wait().IgnoreError();  // a poisoned queue's failure is its poison cause
  absl::Status s = queue_.poison_cause();
  if (s.ok() && !verdict->ok()) {
    s = *verdict;
    queue_.Poison(s);
  }
  shutdown_status_ = s;
  return s;
}

WorkQueue::TaskResult NativeCommunicator::RunTask(const CollectiveCall& call, uint64_t seq,
                                                  absl::Duration timeout, const Body& body,
                                                  const std::shared_ptr<CudaCall>& cuda) {
  const Deadline deadline = Deadline::After(timeout);
  // Note [Ring stamp]: the idle flush leaves the transport to the call.
  const RingStamps::CallScope scope(&ring_stamps_);
  AlgorithmContext ctx(*transport_, std::string(OpKindName(call.kind)), seq, deadline);
  ctx.set_scratch_arena(scratch_).set_piece_bytes(settings_.piece_bytes);
  // Note [Ring stamp]: stamps of the previous rank that arrived since are compared first; slow
  // waits of this call look at them too.
  ctx.set_ring_stamps(&ring_stamps_);
  if (absl::Status s = ring_stamps_.CheckArrived(); !s.ok()) return {s, /*poison=*/true};
  if (!IsPointToPoint(call.kind) && call.kind != OpKind::kSplit) {
    // Note [Agreement check]: always on; the transport already checks point-to-point sizes.
    if (call.kind == OpKind::kAlltoallv) {
      ctx.set_stamp(call.Stamp(seq), call.counts, call.recv_counts);
    } else {
      ctx.set_stamp(call.Stamp(seq));
    }
  }
  // Note [Ring stamp]: every call on the transport also compares stamps around the ring (that
  // of a rank that moved no data too); the node workspace's calls opt out (MarkWorkspaceCall).
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(body(ctx));
    return ctx.FinishAgreement();
  };
  if (cuda != nullptr) return cuda_.Run(ctx, *cuda, run);
  return run();
}

// ---- Collectives ----

std::shared_ptr<Work> NativeCommunicator::Allreduce(Tensor tensor, ReduceOp op,
                                                    CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Allreduce(tensor, op, &args);
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, {{&tensor, CudaTensorRole::kInOut}}, &cuda);
  return Submit(call, args, call_options, cuda, [this, tensor, op](const AlgorithmContext& ctx) {
    if (UseWorkspace(/*hierarchical_ok=*/true)) {
      ctx.MarkWorkspaceCall();
      if (topology_.num_hosts == 1) {
        return ShmAllreduce(ctx, *workspace_, tensor.data(), tensor.numel(), tensor.dtype(), op);
      }
      return HierarchicalAllreduce(ctx, *workspace_, topology_.cross_ranks, settings_.selector,
                                   tensor.data(), tensor.numel(), tensor.dtype(), op);
    }
    return settings_.selector.Allreduce(ctx, tensor.data(), tensor.numel(), tensor.dtype(), op);
  });
}

std::shared_ptr<Work> NativeCommunicator::Broadcast(Tensor tensor, int root,
                                                    CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Broadcast(tensor, root, &args);
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, {{&tensor, CudaTensorRole::kInOut}}, &cuda);
  return Submit(call, args, call_options, cuda, [this, tensor, root](const AlgorithmContext& ctx) {
    if (UseWorkspace(/*hierarchical_ok=*/false)) {
      ctx.MarkWorkspaceCall();
      return ShmBroadcast(ctx, *workspace_, tensor.data(), tensor.numel(), tensor.dtype(), root);
    }
    return settings_.selector.Broadcast(ctx, tensor.data(), tensor.numel(), tensor.dtype(), root);
  });
}

std::shared_ptr<Work> NativeCommunicator::Reduce(Tensor tensor, int root, ReduceOp op,
                                                 CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Reduce(tensor, root, op, &args);
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, {{&tensor, CudaTensorRole::kInOut}}, &cuda);
  return Submit(call, args, call_options, cuda, [tensor, root, op](const AlgorithmContext& ctx) {
    return TreeReduce(ctx, tensor.data(), tensor.numel(), tensor.dtype(), op, root);
  });
}

std::shared_ptr<Work> NativeCommunicator::Allgather(Tensor input, Tensor output,
                                                    CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Allgather(input, output, &args);
  const size_t block_offset = checks_.BlockOffset(input, nullptr);
  const bool in_place =
      static_cast<char*>(input.data()) == static_cast<char*>(output.data()) + block_offset;
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, &input, &output, &cuda);
  return Submit(call, args, call_options, cuda,
                [this, input, output, block_offset, in_place](const AlgorithmContext& ctx) {
                  char* out = static_cast<char*>(output.data());
                  if (UseWorkspace(/*hierarchical_ok=*/false)) {
                    ctx.MarkWorkspaceCall();
                    return ShmAllgather(ctx, *workspace_, input.data(), out, input.numel(),
                                        input.dtype());
                  }
                  if (!in_place && input.nbytes() > 0) {
                    std::memcpy(out + block_offset, input.data(), input.nbytes());
                  }
                  return RingAllgather(ctx, out, input.numel(), input.dtype());
                });
}

std::shared_ptr<Work> NativeCommunicator::Allgatherv(Tensor input, Tensor output,
                                                     std::vector<int64_t> counts,
                                                     CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Allgatherv(input, output, counts, &args);
  const size_t block_offset = args.ok() ? checks_.BlockOffset(input, &counts) : 0;
  const bool in_place = args.ok() && static_cast<char*>(input.data()) ==
                                         static_cast<char*>(output.data()) + block_offset;
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, &input, &output, &cuda);
  return Submit(call, args, call_options, cuda,
                [input, output, counts, block_offset, in_place](const AlgorithmContext& ctx) {
                  char* out = static_cast<char*>(output.data());
                  if (!in_place && input.nbytes() > 0) {
                    std::memcpy(out + block_offset, input.data(), input.nbytes());
                  }
                  return RingAllgatherv(ctx, out, counts, input.dtype());
                });
}

std::shared_ptr<Work> NativeCommunicator::ReduceScatter(Tensor input, Tensor output, ReduceOp op,
                                                        CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.ReduceScatter(input, output, op, &args);
  const int n = world_size();
  const int me = rank();
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, &input, &output, &cuda);
  return Submit(call, args, call_options, cuda,
                [this, input, output, op, n, me](const AlgorithmContext& ctx) {
                  const char* in = static_cast<const char*>(input.data());
                  const char* out = static_cast<const char*>(output.data());
                  // The workspace version reads each piece of the input before it writes that
                  // piece's result: an output that is exactly this rank's input block is fine, any
                  // other overlap is not.
                  const bool overlaps = out < in + input.nbytes() && in < out + output.nbytes();
                  if (UseWorkspace(/*hierarchical_ok=*/false) &&
                      (!overlaps || out == in + static_cast<size_t>(me) * output.nbytes())) {
                    ctx.MarkWorkspaceCall();
                    return ShmReduceScatter(ctx, *workspace_, input.data(), output.data(),
                                            output.numel(), input.dtype(), op);
                  }
                  // The ring reduces in place and leaves partial sums in the other blocks, but the
                  // input must stay unchanged (and may overlap the output): work on a copy.
                  const size_t bytes = input.nbytes();
                  uint8_t* const scratch = input_copy_.Get(bytes);
                  if (bytes > 0) std::memcpy(scratch, input.data(), bytes);
                  const std::vector<int64_t> counts(static_cast<size_t>(n), output.numel());
                  RETURN_IF_ERROR(RingReduceScatter(ctx, scratch, counts, input.dtype(), op));
                  if (output.nbytes() > 0) {
                    std::memcpy(output.data(), scratch + static_cast<size_t>(me) * output.nbytes(),
                                output.nbytes());
                  }
                  return absl::OkStatus();
                });
}

std::shared_ptr<Work> NativeCommunicator::Alltoall(Tensor input, Tensor output,
                                                   CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Alltoall(input, output, &args);
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, &input, &output, &cuda);
  return Submit(call, args, call_options, cuda,
                [this, input, output, n = world_size()](const AlgorithmContext& ctx) {
                  // Note [Workspace alltoall] in shm_collectives.cc (CallChecks made sure that
                  // input and output do not overlap, as both paths need).
                  if (UseWorkspace(/*hierarchical_ok=*/false)) {
                    ctx.MarkWorkspaceCall();
                    return ShmAlltoall(ctx, *workspace_, input.data(), output.data(),
                                       input.numel() / n, input.dtype());
                  }
                  return PairwiseAlltoall(ctx, input.data(), output.data(), input.numel() / n,
                                          input.dtype());
                });
}

std::shared_ptr<Work> NativeCommunicator::Alltoallv(Tensor input, Tensor output,
                                                    std::vector<int64_t> send_counts,
                                                    std::vector<int64_t> recv_counts,
                                                    CallOptions call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.Alltoallv(input, output, send_counts, recv_counts, &args);
  std::shared_ptr<CudaCall> cuda;
  if (args.ok()) args = PrepareCuda(call, &input, &output, &cuda);
  return Submit(call, args, call_options, cuda,
                [input, output, send_counts, recv_counts](const AlgorithmContext& ctx) {
                  return PairwiseAlltoallv(ctx, input.data(), send_counts, output.data(),
                                           recv_counts, input.dtype());
                });
}

std::shared_ptr<Work> NativeCommunicator::Barrier(CallOptions call_options) {
  return Submit(checks_.Barrier(), absl::OkStatus(), call_options, nullptr,
                [](const AlgorithmContext& ctx) { return DisseminationBarrier(ctx); });
}

// ---- Point to point ----

std::shared_ptr<Work> NativeCommunicator::Send(Tensor tensor, int dst, uint32_t tag,
                                               CallOptions call_options) {
  return SubmitPointToPoint(/*is_send=*/true, tensor, dst, tag, call_options);
}

std::shared_ptr<Work> NativeCommunicator::Recv(Tensor tensor, int src, uint32_t tag,
                                               CallOptions call_options) {
  return SubmitPointToPoint(/*is_send=*/false, tensor, src, tag, call_options);
}

std::shared_ptr<Work> NativeCommunicator::SubmitPointToPoint(bool is_send, const Tensor& tensor,
                                                             int peer, uint32_t tag,
                                                             const CallOptions& call_options) {
  absl::Status args;
  const CollectiveCall call = checks_.PointToPoint(is_send, tensor, peer, tag, &args);
  Tensor t = tensor;  // becomes a host view when staged
  std::shared_ptr<CudaCall> cuda;
  if (args.ok())
    args = PrepareCuda(call, {{&t, is_send ? CudaTensorRole::kInput : CudaTensorRole::kOutput}},
                       &cuda);
  return Submit(call, args, call_options, cuda,
                [this, is_send, t, peer, tag](const AlgorithmContext& ctx) {
                  return PointToPoint(ctx, is_send, t, peer, tag);
                });
}

absl::Status NativeCommunicator::PointToPoint(const AlgorithmContext& ctx, bool is_send,
                                              const Tensor& tensor, int peer, uint32_t tag) {
  Channel& channel = transport_->channel(peer);
  // Zero-byte messages travel too: the receiver learns of a size mismatch instead of waiting.
  std::unique_ptr<TransportRequest> request =
      is_send ? channel.Send(tensor.data(), tensor.nbytes(), PointToPointTag(tag))
              : channel.Recv(tensor.data(), tensor.nbytes(), PointToPointTag(tag));
  absl::Status s = request->Wait(ctx.deadline());
  if (s.ok()) return s;
  std::string hint;
  if (absl::IsDeadlineExceeded(s)) {
    hint = absl::StrCat("rank ", peer, " did not post the matching ", is_send ? "Recv" : "Send",
                        " (tag ", tag, ") in time; ", TimeoutHint(TimeoutKind::kCollective));
  } else {
    hint =
        absl::StrCat("rank ", peer, " failed or left first; its own log names the original error");
  }
  absl::Status error =
      ErrorContext()
          .Rank(ctx.rank(), ctx.size())
          .Peer(peer, channel.peer_address())
          .Op(ctx.op_name(), static_cast<int64_t>(ctx.seq()))
          .Bytes(static_cast<int64_t>(tensor.nbytes()))
          .Waited(ctx.deadline().Elapsed(), ctx.deadline().timeout())
          .Hint(hint)
          .Wrap(Annotate(
              s, absl::StrCat(is_send ? "sending " : "receiving ", tensor.nbytes(),
                              " bytes with tag ", tag, is_send ? " to" : " from", " rank ", peer)));
  // Note [Communicator failure]: the queue poisons with this error too; abort here first so the
  // request finishes before its buffer can go away.
  transport_->Abort(error);
  if (!request->IsCompleted()) {
    const absl::Status drained = request->Wait(Deadline::After(kDrainTimeout));
    PADDLE_CHECK(request->IsCompleted())
        << "the " << transport_->name() << " transport left a request pending "
        << absl::FormatDuration(kDrainTimeout) << " after Abort (" << drained << ")";
  }
  return error;
}

// ---- Split and Abort ----

absl::StatusOr<std::unique_ptr<Communicator>> NativeCommunicator::Split(std::vector<int> ranks) {
  absl::Status args;
  const CollectiveCall call = checks_.Split(ranks, &args);
  // The result travels from the queue thread through this slot; the Work's own status says
  // whether the call ran (a failed connection of the new group does not poison this one).
  struct Result {
    absl::Status status;
    std::unique_ptr<Communicator> communicator;
  };
  auto result = std::make_shared<Result>();
  std::shared_ptr<Work> work = Submit(
      call, args, CallOptions{}, nullptr, [this, ranks, result](const AlgorithmContext& ctx) {
        absl::StatusOr<std::unique_ptr<Communicator>> created = CreateSplit(ranks, ctx.seq());
        if (created.ok()) {
          result->communicator = std::move(*created);
        } else {
          result->status = created.status();
        }
        return absl::OkStatus();
      });
  // Bounded by the operations queued before it and the new group's connect timeout.
  RETURN_IF_ERROR(work->Wait());
  RETURN_IF_ERROR(result->status);
  return std::move(result->communicator);
}

absl::StatusOr<std::unique_ptr<Communicator>> NativeCommunicator::CreateSplit(
    const std::vector<int>& ranks, uint64_t seq) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end()) return std::unique_ptr<Communicator>();
  CommunicatorOptions child = options_;
  child.rank = static_cast<int>(it - ranks.begin());
  child.world_size = static_cast<int>(ranks.size());
  // The parent's resolved settings, so the environment cannot make the groups disagree.
  child.transport = settings_.transport;
  child.algorithm = settings_.selector.forced().has_value()
                        ? std::string(AlgorithmName(*settings_.selector.forced()))
                        : std::string();
  if (options_.store != nullptr) {
    // The rank list is part of the prefix: groups split at the same point never share keys.
    child.store = std::make_shared<PrefixStore>(
        absl::StrFormat("%s/split%d_%016x", options_.store_prefix, seq, HashRanks(ranks)),
        options_.store);
  }
  child.store_prefix = "comm";
  absl::StatusOr<std::unique_ptr<Communicator>> created = CreateNativeCommunicator(child);
  if (!created.ok()) {
    return ErrorContext()
        .Rank(rank(), world_size())
        .Op("split", static_cast<int64_t>(seq))
        .Wrap(Annotate(created.status(), absl::StrCat("creating the communicator of ranks ",
                                                      CountsToString(std::vector<int64_t>(
                                                          ranks.begin(), ranks.end())))));
  }
  return created;
}

void NativeCommunicator::Abort(const absl::Status& cause) {
  const absl::Status status = cause.ok() ? absl::AbortedError("no cause given") : cause;
  queue_.Poison(ErrorContext()
                    .Rank(rank(), world_size())
                    .Wrap(Annotate(status, "Communicator::Abort() was called")));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNativeCommunicator(
    const CommunicatorOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const std::string where =
      absl::StrCat("native communicator of rank ", options.rank, "/", options.world_size);
  absl::StatusOr<Settings> settings = ResolveSettings(options);
  if (!settings.ok()) return Annotate(settings.status(), where);

  // The ranks must agree on the settings: rank 0 publishes its own before connecting, so the
  // key exists once the transport (which every rank joins) is up, and the others compare.
  const std::string config_key = absl::StrCat(options.store_prefix, "/config");
  const std::string config = settings->Describe();
  if (options.world_size > 1 && options.rank == 0) {
    RETURN_IF_ERROR(Annotate(options.store->Set(config_key, config),
                             absl::StrCat(where, ": publishing its settings")));
  }

  absl::StatusOr<Topology> topology =
      LearnTopology(options.store.get(), options.store_prefix, options.rank, options.world_size,
                    options.connect_timeout);
  if (!topology.ok()) return Annotate(topology.status(), where);
  RETURN_IF_ERROR(Annotate(
      AgreeOnTuning(options.store.get(), absl::StrCat(options.store_prefix, "/sizes"), options.rank,
                    options.world_size, topology->local_size, options.connect_timeout, &*settings),
      where));

  TransportOptions transport_options;
  transport_options.rank = options.rank;
  transport_options.world_size = options.world_size;
  transport_options.store = options.store;
  transport_options.store_prefix = absl::StrCat(options.store_prefix, "/transport");
  transport_options.connect_timeout = options.connect_timeout;
  absl::StatusOr<std::unique_ptr<Transport>> transport =
      CreateGroupTransport(*settings, *topology, transport_options);
  if (!transport.ok()) return Annotate(transport.status(), where);

  std::unique_ptr<NodeWorkspace> workspace;
  if (settings->shared_memory() && topology->local_size > 1) {
    NodeWorkspaceOptions ws;
    ws.local_rank = topology->local_rank;
    ws.local_size = topology->local_size;
    ws.global_ranks = topology->local_ranks;
    ws.world_size = options.world_size;
    ws.store = options.store;
    ws.store_prefix = absl::StrCat(options.store_prefix, "/workspace/", topology->host_index);
    ws.connect_timeout = options.connect_timeout;
    ws.slot_bytes = settings->slot_bytes;
    absl::StatusOr<std::unique_ptr<NodeWorkspace>> created = NodeWorkspace::Create(ws);
    if (!created.ok()) return Annotate(created.status(), where);
    workspace = *std::move(created);
  }

  if (options.world_size > 1 && options.rank != 0) {
    absl::StatusOr<std::string> rank0 = options.store->Get(config_key, options.connect_timeout);
    if (!rank0.ok()) {
      return Annotate(rank0.status(), absl::StrCat(where, ": reading rank 0's settings"));
    }
    if (*rank0 != config) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": rank 0 runs with \"", *rank0, "\" but this rank with \"", config,
                       "\"; set PADDLE_TRANSPORT, PADDLE_ALGO and PADDLE_PIECE_BYTES (or the "
                       "matching CommunicatorOptions) alike on every rank"));
    }
  }
  PADDLE_LOG(INFO, COLL) << where << " ready: " << settings->Describe() << "; "
                         << topology->Describe() << ", " << (*transport)->name() << " transport"
                         << (workspace != nullptr ? " + node workspace" : "");
  return std::unique_ptr<Communicator>(
      new NativeCommunicator(options, *std::move(settings), *std::move(topology),
                             *std::move(transport), std::move(workspace)));
}

}  // namespace paddle
