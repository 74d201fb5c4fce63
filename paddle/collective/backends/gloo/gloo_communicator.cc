// GlooCommunicator: the operation queue, poisoning and teardown, and each collective as a call
// into Gloo's options-based API (gloo/allreduce.h and friends), whose per-call timeout is what
// lets every operation honour its own deadline.
#include "paddle/collective/backends/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/argument_checks.h"
#include "paddle/collective/backends/gloo/gloo_connection.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/reduction.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Slots of send/recv: above every prefix Gloo's collectives use (gloo/types.h), so a user's tag
// can never match a collective's message.
constexpr uint8_t kP2pSlotPrefix = 0x40;
// (0x41 is the agreement stamps' slot prefix: gloo_agreement.cc.)

// Gloo takes an element size from the pointer type it is given; an unsigned integer type of each
// width stands for every dtype of that width (our reduction function knows the real dtype).
template <typename F>
void WithElementType(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  PADDLE_CHECK(false) << "no element type of " << element_size << " bytes";
}

// Gloo's reduction function (out = a op b, any of the three may alias) over our kernels.
std::function<void(void*, const void*, const void*, size_t)> ReductionFunction(DType dtype,
                                                                               ReduceOp op) {
  const ReduceOp combine = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  return [dtype, combine](void* out, const void* a, const void* b, size_t n) {
    const void* other = b;
    if (out == b) {
      other = a;  // every op is commutative (Note [Reduction semantics])
    } else if (out != a) {
      std::memcpy(out, a, n * DTypeSize(dtype));
    }
    PADDLE_CHECK_OK(paddle::Reduce(out, other, static_cast<int64_t>(n), dtype, combine));
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const CommunicatorOptions& options) {
  const int rank = options.rank;
  const int size = options.world_size;
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("Gloo communicator: options.store is null");
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo communicator: rank ", rank, " / world size ", size,
                     " is not a valid rank of a group (need 0 <= rank < world size)"));
  }
  if (options.timeout <= absl::ZeroDuration() || options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo communicator: timeouts must be positive (timeout ",
                     absl::FormatDuration(options.timeout), ", connect_timeout ",
                     absl::FormatDuration(options.connect_timeout), ")"));
  }
  int algorithm;
  if (options.algorithm.empty() || options.algorithm == "ring") {
    algorithm = gloo::AllreduceOptions::Algorithm::RING;
  } else if (options.algorithm == "bcube") {
    algorithm = gloo::AllreduceOptions::Algorithm::BCUBE;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo communicator: algorithm '", options.algorithm,
                     "' is not one of Gloo's; use \"ring\" (default) or \"bcube\", "
                     "or the native backend for \"tree\" and \"hd\""));
  }

  ASSIGN_OR_RETURN(GlooConnection connection, ConnectGloo(options));
  PADDLE_LOG(INFO, INIT) << "Gloo communicator connected: rank " << rank << "/" << size
                         << ", algorithm "
                         << (options.algorithm.empty() ? "ring" : options.algorithm);
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(options, algorithm, std::move(connection)));
}

GlooCommunicator::GlooCommunicator(const CommunicatorOptions& options, int algorithm,
                                   GlooConnection connection)
    : options_(options),
      rank_(options.rank),
      size_(options.world_size),
      algorithm_(algorithm),
      device_(std::move(connection.device)),
      context_(std::move(connection.context)),
      peer_names_(std::move(connection.peer_names)),
      checks_(rank_, size_,
              [](const Tensor& t, absl::string_view name) { return CheckTensor(t, name); }),
      queue_(std::make_unique<WorkQueue>(
          rank_, size_, [this](const absl::Status& cause) { OnPoison(cause); },
          [] { BlockSigpipeInThisThread(); })) {}  // Note [Gloo and SIGPIPE]

GlooCommunicator::~GlooCommunicator() {
  // Queued operations still run (each is bounded by its timeout); then the thread exits.
  queue_.reset();

  // Every rank reaches the "done" barrier only after its last operation, so once it completes no
  // peer still reads from our sockets and closing them cannot fail anyone (the Gloo TCP teardown
  // race). A poisoned rank releases the others at once instead of making them wait.
  absl::Status cause;
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    cause = failure_;
  }
  const std::string barrier = absl::StrCat(options_.store_prefix, "/gloo/done");
  absl::Status status =
      cause.ok()
          ? StoreBarrier(*options_.store, barrier, rank_, size_, options_.timeout)
          : AbortStoreBarrier(*options_.store, barrier, rank_,
                              absl::StrCat("rank ", rank_, " was poisoned: ", cause.message()));
  if (!status.ok() && cause.ok()) {
    PADDLE_LOG(WARN, COLL) << "Gloo communicator rank " << rank_ << "/" << size_
                           << ": closing without the final barrier: " << status;
  }
  context_.reset();
  device_.reset();
}

std::shared_ptr<Work> GlooCommunicator::Enqueue(const CollectiveCall& call,
                                                const CallOptions& options,
                                                const absl::Status& args, Body body) {
  const absl::Duration timeout =
      options.timeout > absl::ZeroDuration() ? options.timeout : options_.timeout;
  const std::string owner = absl::StrCat("rank ", rank_, "/", size_);
  std::lock_guard<std::mutex> lock(call_mu_);
  uint64_t& counter = IsPointToPoint(call.kind) ? next_p2p_seq_ : next_seq_;
  if (shut_down_) {
    auto work = std::make_shared<QueuedWork>(call.Describe(counter), counter, owner);
    work->Complete(ShutDownError(rank_, size_, OpKindName(call.kind), static_cast<int64_t>(counter),
                                 work->Describe()));
    return work;
  }
  if (!args.ok()) {
    // A bad argument uses no sequence number and poisons nothing: every rank normally passes
    // the same arguments and fails alike, and the communicator stays usable.
    auto work = std::make_shared<QueuedWork>(call.Describe(counter), counter, owner);
    work->Complete(ErrorContext()
                       .Rank(rank_, size_)
                       .Op(OpKindName(call.kind), static_cast<int64_t>(counter))
                       .Wrap(Annotate(args, work->Describe())));
    return work;
  }
  const uint64_t seq = counter++;
  auto work = std::make_shared<QueuedWork>(call.Describe(seq), seq, owner);
  queue_->Enqueue(work, [this, call, seq, timeout, body = std::move(body)] {
    return RunTask(call, seq, timeout, body);
  });
  return work;
}

absl::Status GlooCommunicator::Shutdown() {
  // The queue runs in call order: once a no-op queued last has run, every operation has.
  auto fence =
      std::make_shared<QueuedWork>("shutdown", 0, absl::StrCat("rank ", rank_, "/", size_));
  {
    std::lock_guard<std::mutex> lock(call_mu_);
    shut_down_ = true;
    queue_->Enqueue(fence, [] { return WorkQueue::TaskResult(absl::OkStatus(), false); });
  }
  fence->Wait().IgnoreError();  // a poisoned queue's failure is its poison cause
  return queue_->poison_cause();
}

WorkQueue::TaskResult GlooCommunicator::RunTask(const CollectiveCall& call, uint64_t seq,
                                                absl::Duration timeout, const Body& body) {
  const bool collective = !IsPointToPoint(call.kind);
  GlooCallInfo info;
  info.rank = rank_;
  info.world_size = size_;
  info.op = std::string(OpKindName(call.kind));
  info.seq = static_cast<int64_t>(seq);
  info.bytes = call.bytes;
  info.peer = collective ? -1 : call.root;
  info.timeout = timeout;
  info.peer_names = &peer_names_;
  absl::Status status;
  if (collective) {
    bool poison = false;
    status = ExchangeStamps(call, info, &poison);
    // Likewise, unless some rank may have missed the disagreement and entered Gloo.
    if (absl::IsInvalidArgument(status) && !poison) return {status, /*poison=*/false};
  }
  if (status.ok()) status = body(info);
  // Abort() during the operation fails it too, whatever Gloo returned.
  const absl::Status cause = queue_->poison_cause();
  if (!cause.ok()) {
    return absl::Status(cause.code(), absl::StrCat("the Gloo communicator was poisoned while it "
                                                   "ran; the failure: ",
                                                   cause.message()));
  }
  if (status.ok()) return status;
  queue_->Poison(Annotate(status, call.Describe(seq)));
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    const std::string reports = ReportsFromPeers();
    if (!reports.empty()) {
      status = absl::Status(
          status.code(),
          absl::StrCat(status.message(), "; failures reported by other ranks: ", reports));
    }
  }
  return status;
}

void GlooCommunicator::OnPoison(const absl::Status& cause) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    failure_ = cause;
  }
  // Published before the connections close, so a peer that sees them close finds it.
  constexpr size_t kMaxReport = 600;
  absl::Status published =
      options_.store->Set(FailureKey(rank_), cause.ToString().substr(0, kMaxReport));
  if (!published.ok()) {
    PADDLE_LOG(WARN, COLL) << "could not publish the failure of rank " << rank_ << ": "
                           << published;
  }
  // Peers blocked on this rank then fail at once with "connection closed" naming it, instead of
  // waiting for their timeout. Gloo's pairs lock themselves, so this is safe while the queue
  // thread is inside Gloo; that operation still runs to its own end (Note [Gloo backend
  // semantics]).
  context_->closeConnections();
}

// Note [Gloo failure reports]. A rank that loses a peer usually sees only its nearest
// neighbour close: in a ring, the rank that failed first makes its neighbours fail, they close in
// turn, and so on. Each poisoned rank therefore writes its cause to "<prefix>/gloo/failed/<rank>"
// before closing its connections, and a rank whose operation failed reads the reports that exist
// (without waiting for more) into its own error. A process that was killed writes nothing; its
// neighbours name it by its address (Note [Gloo peer addresses]).
std::string GlooCommunicator::FailureKey(int rank) const {
  return absl::StrCat(options_.store_prefix, "/gloo/failed/", rank);
}

std::string GlooCommunicator::ReportsFromPeers() const {
  std::vector<std::string> reports;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const std::string key = FailureKey(r);
    absl::StatusOr<bool> exists = options_.store->Check({key});
    if (!exists.ok() || !*exists) continue;
    absl::StatusOr<std::string> report = options_.store->Get(key, absl::Seconds(1));
    if (report.ok()) reports.push_back(absl::StrCat("rank ", r, ": ", *report));
  }
  return absl::StrJoin(reports, "; ");
}

void GlooCommunicator::Abort(const absl::Status& cause) {
  absl::Status status = cause.ok() ? absl::AbortedError("Abort() called with an OK status") : cause;
  queue_->Poison(ErrorContext().Rank(rank_, size_).Wrap(Annotate(status, "aborted")));
}

absl::Status GlooCommunicator::GlooAllreduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                             const GlooCallInfo& call) {
  return CallGloo(call, [&] {
    WithElementType(DTypeSize(dtype), [&](auto element) {
      using T = decltype(element);
      gloo::AllreduceOptions opts(context_);
      opts.setAlgorithm(static_cast<gloo::AllreduceOptions::Algorithm>(algorithm_));
      opts.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
      opts.setReduceFunction(ReductionFunction(dtype, op));
      opts.setTag(static_cast<uint32_t>(call.seq));
      opts.setTimeout(ToGlooTimeout(call.timeout));
      gloo::allreduce(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Allreduce(Tensor tensor, ReduceOp op, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allreduce(tensor, op, &args);
  return Enqueue(what, call, args, [this, tensor, op](const GlooCallInfo& c) {
    if (tensor.numel() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(GlooAllreduce(tensor.data(), tensor.numel(), tensor.dtype(), op, c));
    if (op != ReduceOp::kAvg) return absl::OkStatus();
    return FinishAvg(tensor.data(), tensor.numel(), tensor.dtype(), size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::Broadcast(Tensor tensor, int root, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Broadcast(tensor, root, &args);
  return Enqueue(what, call, args, [this, tensor, root](const GlooCallInfo& c) {
    if (tensor.numel() == 0) return absl::OkStatus();
    return CallGloo(c, [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setRoot(root);
      opts.setOutput(static_cast<uint8_t*>(tensor.data()), tensor.nbytes());
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(ToGlooTimeout(c.timeout));
      gloo::broadcast(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Reduce(Tensor tensor, int root, ReduceOp op,
                                               CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Reduce(tensor, root, op, &args);
  return Enqueue(what, call, args, [this, tensor, root, op](const GlooCallInfo& c) {
    if (tensor.numel() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(CallGloo(c, [&] {
      WithElementType(tensor.element_size(), [&](auto element) {
        using T = decltype(element);
        gloo::ReduceOptions opts(context_);
        opts.setRoot(root);
        opts.setOutput(static_cast<T*>(tensor.data()), static_cast<size_t>(tensor.numel()));
        opts.setReduceFunction(ReductionFunction(tensor.dtype(), op));
        opts.setTag(static_cast<uint32_t>(c.seq));
        opts.setTimeout(ToGlooTimeout(c.timeout));
        gloo::reduce(opts);
      });
    }));
    if (op != ReduceOp::kAvg || rank_ != root) return absl::OkStatus();
    return FinishAvg(tensor.data(), tensor.numel(), tensor.dtype(), size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::Allgather(Tensor input, Tensor output, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allgather(input, output, &args);
  return Enqueue(what, call, args, [this, input, output](const GlooCallInfo& c) {
    if (input.numel() == 0) return absl::OkStatus();
    return CallGloo(c, [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(input.data()), input.nbytes());
      opts.setOutput(static_cast<uint8_t*>(output.data()), output.nbytes());
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(ToGlooTimeout(c.timeout));
      gloo::allgather(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Allgatherv(Tensor input, Tensor output,
                                                   std::vector<int64_t> counts, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Allgatherv(input, output, counts, &args);
  std::vector<size_t> bytes;
  for (int64_t n : counts) bytes.push_back(static_cast<size_t>(n) * input.element_size());
  return Enqueue(what, call, args, [this, input, output, bytes](const GlooCallInfo& c) {
    if (output.numel() == 0) return absl::OkStatus();
    return CallGloo(c, [&] {
      gloo::AllgathervOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(input.data()), input.nbytes());
      opts.setOutput(static_cast<uint8_t*>(output.data()),
                     std::vector<size_t>(bytes.begin(), bytes.end()));
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(ToGlooTimeout(c.timeout));
      gloo::allgatherv(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::ReduceScatter(Tensor input, Tensor output, ReduceOp op,
                                                      CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.ReduceScatter(input, output, op, &args);
  return Enqueue(what, call, args, [this, input, output, op](const GlooCallInfo& c) {
    if (output.numel() == 0) return absl::OkStatus();
    // Note [Gloo backend semantics]: an allreduce of a copy, then this rank's block.
    absl::StatusOr<Tensor> scratch = input.Clone();
    if (!scratch.ok()) return scratch.status();
    RETURN_IF_ERROR(GlooAllreduce(scratch->data(), input.numel(), input.dtype(), op, c));
    std::memcpy(output.data(), static_cast<char*>(scratch->data()) + rank_ * output.nbytes(),
                output.nbytes());
    if (op != ReduceOp::kAvg) return absl::OkStatus();
    return FinishAvg(output.data(), output.numel(), output.dtype(), size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::Alltoall(Tensor input, Tensor output, CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Alltoall(input, output, &args);
  return Enqueue(what, call, args, [this, input, output](const GlooCallInfo& c) {
    if (input.numel() == 0) return absl::OkStatus();
    return CallGloo(c, [&] {
      gloo::AlltoallOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(input.data()), input.nbytes());
      opts.setOutput(static_cast<uint8_t*>(output.data()), output.nbytes());
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(ToGlooTimeout(c.timeout));
      gloo::alltoall(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Alltoallv(Tensor input, Tensor output,
                                                  std::vector<int64_t> send_counts,
                                                  std::vector<int64_t> recv_counts,
                                                  CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Alltoallv(input, output, send_counts, recv_counts, &args);
  std::vector<int64_t> send_bytes, recv_bytes;
  for (int64_t n : send_counts)
    send_bytes.push_back(n * static_cast<int64_t>(input.element_size()));
  for (int64_t n : recv_counts)
    recv_bytes.push_back(n * static_cast<int64_t>(input.element_size()));
  return Enqueue(what, call, args,
                 [this, input, output, send_bytes, recv_bytes](const GlooCallInfo& c) {
                   return CallGloo(c, [&] {
                     gloo::AlltoallvOptions opts(context_);
                     opts.setInput(static_cast<uint8_t*>(input.data()), send_bytes);
                     opts.setOutput(static_cast<uint8_t*>(output.data()), recv_bytes);
                     opts.setTag(static_cast<uint32_t>(c.seq));
                     opts.setTimeout(ToGlooTimeout(c.timeout));
                     gloo::alltoallv(opts);
                   });
                 });
}

std::shared_ptr<Work> GlooCommunicator::Barrier(CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.Barrier();
  return Enqueue(what, call, absl::OkStatus(), [this](const GlooCallInfo& c) {
    return CallGloo(c, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(static_cast<uint32_t>(c.seq));
      opts.setTimeout(ToGlooTimeout(c.timeout));
      gloo::barrier(opts);
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Send(Tensor tensor, int dst, uint32_t tag,
                                             CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.PointToPoint(true, tensor, dst, tag, &args);
  return Enqueue(what, call, args, [this, tensor, dst, tag](const GlooCallInfo& c) {
    return CallGloo(c, [&] {
      auto buffer = context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
      buffer->send(dst, gloo::Slot::build(kP2pSlotPrefix, tag));
      buffer->waitSend(ToGlooTimeout(c.timeout));
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Recv(Tensor tensor, int src, uint32_t tag,
                                             CallOptions call) {
  absl::Status args;
  const CollectiveCall what = checks_.PointToPoint(false, tensor, src, tag, &args);
  return Enqueue(what, call, args, [this, tensor, src, tag](const GlooCallInfo& c) {
    return CallGloo(c, [&] {
      auto buffer = context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
      buffer->recv(src, gloo::Slot::build(kP2pSlotPrefix, tag));
      buffer->waitRecv(ToGlooTimeout(c.timeout));
    });
  });
}

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Split(std::vector<int> ranks) {
  {
    std::lock_guard<std::mutex> lock(call_mu_);
    if (shut_down_) {
      return ShutDownError(rank_, size_, "split", -1, "");
    }
  }
  // Every rank counts its Split calls alike, so each call gets its own store prefix.
  const uint64_t index = splits_++;
  for (size_t i = 0; i < ranks.size(); ++i) {
    RETURN_IF_ERROR(CheckRankArgument(ranks[i], size_, "Split: rank"));
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("Split: ranks [", absl::StrJoin(ranks, ", "),
                                                     "] must be sorted and unique"));
    }
  }
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return std::unique_ptr<Communicator>();
  CommunicatorOptions options = options_;
  options.store_prefix = absl::StrCat(options_.store_prefix, "/split", index);
  options.rank = static_cast<int>(me - ranks.begin());
  options.world_size = static_cast<int>(ranks.size());
  return CreateGlooCommunicator(options);
}

}  // namespace paddle
