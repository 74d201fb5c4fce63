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
#include "paddle/collective/backends/gloo/gloo_work.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/reduction.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
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

// Element counts to byte counts (CheckCountsArgument first); returns their sum in elements.
absl::StatusOr<int64_t> CountsToBytes(const std::vector<int64_t>& counts, size_t element_size,
                                      int size, absl::string_view name,
                                      std::vector<int64_t>* bytes) {
  int64_t total = 0;
  RETURN_IF_ERROR(CheckCountsArgument(counts, size, name, &total));
  for (int64_t count : counts) bytes->push_back(count * static_cast<int64_t>(element_size));
  return total;
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

  // PADDLE_DEBUG_CHECKS turns the checks on where the options leave them off.
  ASSIGN_OR_RETURN(std::optional<bool> debug_env, BoolSetting("PADDLE_DEBUG_CHECKS"));
  CommunicatorOptions resolved = options;
  resolved.debug_checks = options.debug_checks || debug_env.value_or(false);

  ASSIGN_OR_RETURN(GlooConnection connection, ConnectGloo(options));
  PADDLE_LOG(INFO, INIT) << "Gloo communicator connected: rank " << rank << "/" << size
                         << ", algorithm "
                         << (options.algorithm.empty() ? "ring" : options.algorithm);
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(resolved, algorithm, std::move(connection)));
}

GlooCommunicator::GlooCommunicator(const CommunicatorOptions& options, int algorithm,
                                   GlooConnection connection)
    : options_(options),
      rank_(options.rank),
      size_(options.world_size),
      algorithm_(algorithm),
      debug_checks_(options.debug_checks),
      device_(std::move(connection.device)),
      context_(std::move(connection.context)),
      peer_names_(std::move(connection.peer_names)) {
  worker_ = std::thread([this] { RunLoop(); });
}

GlooCommunicator::~GlooCommunicator() {
  // Queued operations still run (each is bounded by its timeout); then the worker exits.
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();

  // Every rank reaches the "done" barrier only after its last operation, so once it completes no
  // peer still reads from our sockets and closing them cannot fail anyone (the Gloo TCP teardown
  // race). A poisoned rank releases the others at once instead of making them wait.
  absl::Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cause = poison_;
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

std::string GlooCommunicator::Describe(const OpInfo& info, uint64_t seq, bool collective) const {
  std::string out = absl::StrCat(info.name, " #", seq);
  if (info.name == "barrier") return out;
  absl::StrAppend(&out, " (", DTypeName(info.dtype), " x ", info.count);
  if (info.reduce_op >= 0) {
    absl::StrAppend(&out, ", ", ReduceOpName(static_cast<ReduceOp>(info.reduce_op)));
  }
  if (info.root >= 0) absl::StrAppend(&out, ", root ", info.root);
  if (!collective) {
    absl::StrAppend(&out, info.name == "send" ? " to rank " : " from rank ", info.peer, ", tag ",
                    info.extra);
  }
  return absl::StrCat(out, ")");
}

std::shared_ptr<Work> GlooCommunicator::Enqueue(OpInfo info, const CallOptions& call,
                                                bool collective, const absl::Status& check,
                                                Body body) {
  const absl::Duration timeout =
      call.timeout > absl::ZeroDuration() ? call.timeout : options_.timeout;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& counter = collective ? next_seq_ : next_p2p_seq_;
  auto work = std::make_shared<GlooWork>(Describe(info, counter, collective), counter, rank_, size_,
                                         timeout);
  if (!check.ok()) {
    // A bad argument uses no sequence number and poisons nothing: every rank normally passes
    // the same arguments and fails alike, and the communicator stays usable.
    work->Complete(ErrorContext()
                       .Rank(rank_, size_)
                       .Op(info.name, static_cast<int64_t>(counter))
                       .Wrap(Annotate(check, work->Describe())));
    return work;
  }
  if (!poison_.ok()) {
    work->Complete(PoisonedError(work->Describe(), poison_));
    return work;
  }
  Pending pending;
  pending.work = work;
  pending.info = std::move(info);
  pending.seq = counter++;
  pending.timeout = timeout;
  pending.collective = collective;
  pending.body = std::move(body);
  queue_.push_back(std::move(pending));
  cv_.notify_one();
  return work;
}

void GlooCommunicator::RunLoop() {
  ScopedLogRank log_rank(rank_, size_);
  BlockSigpipeInThisThread();  // Note [Gloo and SIGPIPE]
  for (;;) {
    Pending op;
    absl::Status cause;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      cause = poison_;
    }
    if (!cause.ok()) {
      op.work->Complete(PoisonedError(op.work->Describe(), cause));
      continue;
    }
    GlooCallInfo call;
    call.rank = rank_;
    call.world_size = size_;
    call.op = op.info.name;
    call.seq = static_cast<int64_t>(op.seq);
    call.bytes = op.info.bytes;
    call.peer = op.info.peer;
    call.timeout = op.timeout;
    call.peer_names = &peer_names_;
    PADDLE_LOG(DEBUG, COLL) << "start " << op.work->Describe();
    absl::Status status;
    if (debug_checks_ && op.collective) {
      status = CheckAgreement(op.info, call);
      // A disagreement is found by every rank alike before any data moves: it fails this
      // operation only. A failure of the check's own allgather is a real failure.
      if (absl::IsInvalidArgument(status)) {
        op.work->Complete(Annotate(status, op.work->Describe()));
        continue;
      }
    }
    if (status.ok() && op.collective) {
      bool poison = false;
      status = ExchangeStamps(op.info, call, &poison);
      // Likewise, unless some rank may have missed the disagreement and entered Gloo.
      if (absl::IsInvalidArgument(status) && !poison) {
        op.work->Complete(Annotate(status, op.work->Describe()));
        continue;
      }
    }
    if (status.ok()) status = op.body(call);
    if (!status.ok()) status = Annotate(status, op.work->Describe());
    {
      // Abort() during the operation fails it too, whatever Gloo returned.
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) status = PoisonedError(op.work->Describe(), poison_);
    }
    if (!status.ok() && Poison(status) &&
        (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))) {
      const std::string reports = ReportsFromPeers();
      if (!reports.empty()) {
        status = absl::Status(
            status.code(),
            absl::StrCat(status.message(), "; failures reported by other ranks: ", reports));
      }
    }
    PADDLE_LOG(DEBUG, COLL) << "end " << op.work->Describe() << ": " << status;
    op.work->Complete(std::move(status));
  }
}

bool GlooCommunicator::Poison(const absl::Status& cause) {
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) return false;
    poison_ = cause;
    failed.swap(queue_);
  }
  PADDLE_LOG(WARN, COLL) << "Gloo communicator rank " << rank_ << "/" << size_
                         << " poisoned: " << cause;
  for (Pending& op : failed) op.work->Complete(PoisonedError(op.work->Describe(), cause));
  // Published before the connections close, so a peer that sees them close finds it.
  constexpr size_t kMaxReport = 600;
  absl::Status published =
      options_.store->Set(FailureKey(rank_), cause.ToString().substr(0, kMaxReport));
  if (!published.ok()) {
    PADDLE_LOG(WARN, COLL) << "could not publish the failure of rank " << rank_ << ": "
                           << published;
  }
  // Peers blocked on this rank then fail at once with "connection closed" naming it, instead of
  // waiting for their timeout. Gloo's pairs lock themselves, so this is safe while the worker
  // thread is inside Gloo; that operation still runs to its own end (Note [Gloo backend
  // semantics]).
  context_->closeConnections();
  return true;
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

absl::Status GlooCommunicator::PoisonedError(const std::string& what,
                                             const absl::Status& cause) const {
  return absl::Status(cause.code(),
                      absl::StrCat(what, " not run on rank ", rank_, "/", size_,
                                   ": the Gloo communicator was poisoned by an earlier failure; "
                                   "build a new communicator to continue. The failure: ",
                                   cause.message()));
}

void GlooCommunicator::Abort(const absl::Status& cause) {
  absl::Status status = cause.ok() ? absl::AbortedError("Abort() called with an OK status") : cause;
  Poison(ErrorContext().Rank(rank_, size_).Wrap(Annotate(status, "aborted")));
}

// Note [Collective debug checks] for Gloo: a fixed-size record per rank, allgathered with the
// operation's own tag before it runs. Every rank sees every record, so all fail alike.
absl::Status GlooCommunicator::CheckAgreement(const OpInfo& info, const GlooCallInfo& call) {
  struct Record {
    char name[16];
    int32_t dtype;
    int32_t reduce_op;
    int32_t root;
    int32_t pad;
    int64_t count;
    uint64_t seq;
    uint64_t extra;
  };
  Record mine{};
  std::strncpy(mine.name, info.name.c_str(), sizeof(mine.name) - 1);
  mine.dtype = static_cast<int32_t>(info.dtype);
  mine.reduce_op = info.reduce_op;
  mine.root = info.root;
  mine.count = info.count;
  mine.seq = static_cast<uint64_t>(call.seq);
  mine.extra = info.extra;
  std::vector<Record> all(size_);
  GlooCallInfo check = call;
  check.op = absl::StrCat(call.op, " debug check");
  RETURN_IF_ERROR(CallGloo(check, [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(reinterpret_cast<uint8_t*>(&mine), sizeof(mine));
    opts.setOutput(reinterpret_cast<uint8_t*>(all.data()), sizeof(Record) * all.size());
    opts.setTag(static_cast<uint32_t>(call.seq));
    opts.setTimeout(ToGlooTimeout(call.timeout));
    gloo::allgather(opts);
  }));
  auto describe = [](const Record& r) {
    std::string out =
        absl::StrCat(std::string(r.name, strnlen(r.name, sizeof(r.name))), " #", r.seq, " ",
                     DTypeName(static_cast<DType>(r.dtype)), " x ", r.count);
    if (r.reduce_op >= 0)
      absl::StrAppend(&out, " ", ReduceOpName(static_cast<ReduceOp>(r.reduce_op)));
    if (r.root >= 0) absl::StrAppend(&out, " root ", r.root);
    if (r.extra != 0) absl::StrAppend(&out, " counts#", r.extra);
    return out;
  };
  std::vector<std::string> lines;
  bool differ = false;
  for (int r = 0; r < size_; ++r) {
    differ |= std::memcmp(&all[r], &all[0], sizeof(Record)) != 0;
    lines.push_back(absl::StrCat("rank ", r, ": ", describe(all[r])));
  }
  if (!differ) return absl::OkStatus();
  return ErrorContext()
      .Rank(rank_, size_)
      .Op(info.name, call.seq)
      .Hint(
          "every rank must call the same collectives in the same order with the same "
          "dtype, count, root and op")
      .Wrap(absl::InvalidArgumentError(absl::StrCat(
          "PADDLE_DEBUG_CHECKS: ranks disagree on the operation: ", absl::StrJoin(lines, "; "))));
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
  OpInfo info{"allreduce",
              tensor.dtype(),
              tensor.numel(),
              -1,
              -1,
              static_cast<int>(op),
              0,
              static_cast<int64_t>(tensor.nbytes())};
  absl::Status check = CheckTensor(tensor, "tensor");
  if (check.ok()) check = CheckReduction(tensor.dtype(), op);
  return Enqueue(info, call, true, check, [this, tensor, op](const GlooCallInfo& c) {
    if (tensor.numel() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(GlooAllreduce(tensor.data(), tensor.numel(), tensor.dtype(), op, c));
    if (op != ReduceOp::kAvg) return absl::OkStatus();
    return FinishAvg(tensor.data(), tensor.numel(), tensor.dtype(), size_);
  });
}

std::shared_ptr<Work> GlooCommunicator::Broadcast(Tensor tensor, int root, CallOptions call) {
  OpInfo info{"broadcast",
              tensor.dtype(),
              tensor.numel(),
              root,
              -1,
              -1,
              0,
              static_cast<int64_t>(tensor.nbytes())};
  absl::Status check = CheckTensor(tensor, "tensor");
  if (check.ok()) check = CheckRankArgument(root, size_, "root");
  return Enqueue(info, call, true, check, [this, tensor, root](const GlooCallInfo& c) {
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
  OpInfo info{"reduce",
              tensor.dtype(),
              tensor.numel(),
              root,
              -1,
              static_cast<int>(op),
              0,
              static_cast<int64_t>(tensor.nbytes())};
  absl::Status check = CheckTensor(tensor, "tensor");
  if (check.ok()) check = CheckRankArgument(root, size_, "root");
  if (check.ok()) check = CheckReduction(tensor.dtype(), op);
  return Enqueue(info, call, true, check, [this, tensor, root, op](const GlooCallInfo& c) {
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
  OpInfo info{"allgather",
              input.dtype(),
              input.numel(),
              -1,
              -1,
              -1,
              0,
              static_cast<int64_t>(output.nbytes())};
  absl::Status check = CheckTensor(input, "input");
  if (check.ok()) check = CheckTensor(output, "output");
  if (check.ok()) check = CheckSameDType(input, "input", output, "output");
  if (check.ok() && output.numel() != input.numel() * size_) {
    check = absl::InvalidArgumentError(
        absl::StrCat("output has ", output.numel(),
                     " elements; it needs world size x input = ", size_, " x ", input.numel()));
  }
  return Enqueue(info, call, true, check, [this, input, output](const GlooCallInfo& c) {
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
  OpInfo info{"allgatherv",
              input.dtype(),
              input.numel(),
              -1,
              -1,
              -1,
              HashCounts(counts),
              static_cast<int64_t>(output.nbytes())};
  std::vector<int64_t> bytes;
  absl::Status check = CheckTensor(input, "input");
  if (check.ok()) check = CheckTensor(output, "output");
  if (check.ok()) check = CheckSameDType(input, "input", output, "output");
  if (check.ok()) {
    absl::StatusOr<int64_t> total =
        CountsToBytes(counts, input.element_size(), size_, "counts", &bytes);
    if (!total.ok()) {
      check = total.status();
    } else if (input.numel() != counts[rank_] || output.numel() != *total) {
      check = absl::InvalidArgumentError(absl::StrCat(
          "input has ", input.numel(), " elements and output ", output.numel(), "; counts [",
          absl::StrJoin(counts, ", "), "] need ", counts[rank_], " and ", *total));
    }
  }
  return Enqueue(info, call, true, check, [this, input, output, bytes](const GlooCallInfo& c) {
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
  OpInfo info{"reduce_scatter",
              input.dtype(),
              input.numel(),
              -1,
              -1,
              static_cast<int>(op),
              0,
              static_cast<int64_t>(input.nbytes())};
  absl::Status check = CheckTensor(input, "input");
  if (check.ok()) check = CheckTensor(output, "output");
  if (check.ok()) check = CheckSameDType(input, "input", output, "output");
  if (check.ok()) check = CheckReduction(input.dtype(), op);
  if (check.ok() && input.numel() != output.numel() * size_) {
    check = absl::InvalidArgumentError(
        absl::StrCat("input has ", input.numel(),
                     " elements; it needs world size x output = ", size_, " x ", output.numel()));
  }
  return Enqueue(info, call, true, check, [this, input, output, op](const GlooCallInfo& c) {
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
  OpInfo info{"alltoall",
              input.dtype(),
              input.numel(),
              -1,
              -1,
              -1,
              0,
              static_cast<int64_t>(input.nbytes())};
  absl::Status check = CheckTensor(input, "input");
  if (check.ok()) check = CheckTensor(output, "output");
  if (check.ok()) check = CheckSameDType(input, "input", output, "output");
  if (check.ok() && (input.numel() != output.numel() || input.numel() % size_ != 0)) {
    check = absl::InvalidArgumentError(
        absl::StrCat("input has ", input.numel(), " elements and output ", output.numel(),
                     "; both need the same count, a multiple of the world size ", size_));
  }
  return Enqueue(info, call, true, check, [this, input, output](const GlooCallInfo& c) {
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
  OpInfo info{"alltoallv",
              input.dtype(),
              input.numel(),
              -1,
              -1,
              -1,
              0,
              static_cast<int64_t>(input.nbytes())};
  std::vector<int64_t> send_bytes, recv_bytes;
  absl::Status check = CheckTensor(input, "input");
  if (check.ok()) check = CheckTensor(output, "output");
  if (check.ok()) check = CheckSameDType(input, "input", output, "output");
  if (check.ok()) {
    absl::StatusOr<int64_t> sent =
        CountsToBytes(send_counts, input.element_size(), size_, "send_counts", &send_bytes);
    absl::StatusOr<int64_t> received =
        CountsToBytes(recv_counts, input.element_size(), size_, "recv_counts", &recv_bytes);
    if (!sent.ok()) {
      check = sent.status();
    } else if (!received.ok()) {
      check = received.status();
    } else if (*sent != input.numel() || *received != output.numel()) {
      check = absl::InvalidArgumentError(
          absl::StrCat("input has ", input.numel(), " elements and output ", output.numel(),
                       "; send_counts add up to ", *sent, " and recv_counts to ", *received));
    }
  }
  if (check.ok()) {
    info.send_counts = send_counts;
    info.recv_counts = recv_counts;
  }
  return Enqueue(info, call, true, check,
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
  OpInfo info{"barrier", DType::kUInt8, 0, -1, -1, -1, 0, 0};
  return Enqueue(info, call, true, absl::OkStatus(), [this](const GlooCallInfo& c) {
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
  OpInfo info{"send",
              tensor.dtype(),
              tensor.numel(),
              -1,
              dst,
              -1,
              tag,
              static_cast<int64_t>(tensor.nbytes())};
  absl::Status check = CheckTensor(tensor, "tensor");
  if (check.ok()) check = CheckRankArgument(dst, size_, "destination rank");
  if (check.ok() && dst == rank_) check = absl::InvalidArgumentError("send to this rank itself");
  return Enqueue(info, call, false, check, [this, tensor, dst, tag](const GlooCallInfo& c) {
    return CallGloo(c, [&] {
      auto buffer = context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
      buffer->send(dst, gloo::Slot::build(kP2pSlotPrefix, tag));
      buffer->waitSend(ToGlooTimeout(c.timeout));
    });
  });
}

std::shared_ptr<Work> GlooCommunicator::Recv(Tensor tensor, int src, uint32_t tag,
                                             CallOptions call) {
  OpInfo info{"recv",
              tensor.dtype(),
              tensor.numel(),
              -1,
              src,
              -1,
              tag,
              static_cast<int64_t>(tensor.nbytes())};
  absl::Status check = CheckTensor(tensor, "tensor");
  if (check.ok()) check = CheckRankArgument(src, size_, "source rank");
  if (check.ok() && src == rank_) check = absl::InvalidArgumentError("recv from this rank itself");
  return Enqueue(info, call, false, check, [this, tensor, src, tag](const GlooCallInfo& c) {
    return CallGloo(c, [&] {
      auto buffer = context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
      buffer->recv(src, gloo::Slot::build(kP2pSlotPrefix, tag));
      buffer->waitRecv(ToGlooTimeout(c.timeout));
    });
  });
}

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Split(std::vector<int> ranks) {
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
  options.debug_checks = debug_checks_;
  return CreateGlooCommunicator(options);
}

}  // namespace paddle
