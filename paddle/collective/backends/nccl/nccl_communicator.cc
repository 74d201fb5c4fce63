// NcclCommunicator: rendezvous, the launch path of every operation (Note [NCCL streams]), the
// watchdog and poisoning, and each collective as NCCL calls. See nccl_communicator.h.
#include "paddle/collective/backends/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/argument_checks.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/backends/common/communicator_operations.h"
#include "paddle/collective/backends/nccl/nccl_comm.h"
#include "paddle/collective/backends/nccl/nccl_status.h"
#include "paddle/collective/backends/nccl/nccl_work.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr absl::Duration kWatchdogInterval = absl::Milliseconds(2);

// The NCCL calls of one operation, issued on `stream`.
using Body = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;

// A defined, contiguous CUDA tensor on `device` with a dtype NCCL has.
absl::Status CheckCudaTensor(const Tensor& tensor, absl::string_view name, int device) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is undefined (a default Tensor)"));
  }
  if (tensor.device() != Device::Cuda(device)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", tensor.ToString(), " is on ", tensor.device().ToString(),
                     " but this NCCL communicator is bound to ", Device::Cuda(device).ToString(),
                     "; copy it there (the native and gloo backends take CPU tensors)"));
  }
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " ", tensor.ToString(), " with strides ",
                                                   ShapeToString(tensor.strides()),
                                                   " is not contiguous; call Contiguous() first"));
  }
  return NcclDataType(tensor.dtype()).status();
}

// The device of Note [NCCL backend semantics]: PADDLE_CUDA_DEVICE, else LOCAL_RANK, else rank,
// modulo `count`.
absl::StatusOr<int> SelectDevice(int rank, int count) {
  ASSIGN_OR_RETURN(std::optional<int64_t> device, IntSetting("PADDLE_CUDA_DEVICE"));
  if (device.has_value()) return static_cast<int>(*device % count);
  // LOCAL_RANK is torchrun's variable, not in our settings table.
  const char* local_rank = std::getenv("LOCAL_RANK");
  if (local_rank == nullptr || local_rank[0] == '\0') return rank % count;
  int parsed = -1;
  if (!absl::SimpleAtoi(local_rank, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LOCAL_RANK=\"", local_rank, "\" is not a non-negative integer (the CUDA device to use)"));
  }
  return parsed % count;
}

// Note [NCCL backend semantics], Rendezvous.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(const CommunicatorOptions& options) {
  Store& store = *options.store;
  const std::string base = absl::StrCat(options.store_prefix, "/nccl");
  ASSIGN_OR_RETURN(int64_t joined, store.Add(absl::StrCat(base, "/joined"), 1));
  const int64_t generation = (joined - 1) / options.world_size;
  const std::string key = absl::StrCat(base, "/", generation, "/unique_id");
  ncclUniqueId id;
  if (options.rank == 0) {
    PADDLE_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store.Set(
        key, absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)))));
    return id;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> hex = store.Get(key, options.connect_timeout);
  if (!hex.ok()) {
    return ErrorContext()
        .Rank(options.rank, options.world_size)
        .Peer(0)
        .Op("nccl rendezvous")
        .Waited(absl::Now() - start, options.connect_timeout)
        .Hint(absl::StrCat("rank 0 publishes NCCL's unique id under '", key, "' in ",
                           store.Describe(), "; start rank 0 or raise PADDLE_CONNECT_TIMEOUT_S"))
        .Wrap(hex.status());
  }
  const std::string bytes = absl::HexStringToBytes(*hex);
  if (bytes.size() != sizeof(id.internal)) {
    return absl::InternalError(absl::StrCat("the NCCL unique id under '", key, "' has ",
                                            bytes.size(), " bytes, not ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

class NcclCommunicator : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Make(const CommunicatorOptions& options,
                                                            std::shared_ptr<NcclComm> comm);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Backend backend() const override { return Backend::kNccl; }

  PADDLE_COMMUNICATOR_OPERATIONS;

 private:
  struct Pending {
    std::shared_ptr<NcclWork> work;
    std::vector<Tensor> keep;  // alive until the GPU is done with them (or the comm is aborted)
    std::string name;
    uint64_t seq = 0;
    int64_t bytes = 0;
    absl::Time start;
    absl::Duration timeout;
  };

  NcclCommunicator(const CommunicatorOptions& options, std::shared_ptr<NcclComm> comm)
      : options_(options),
        rank_(options.rank),
        size_(options.world_size),
        device_(comm->device()),
        comm_(std::move(comm)),
        checks_(rank_, size_, [device = device_](const Tensor& t, absl::string_view name) {
          return CheckCudaTensor(t, name, device);
        }) {}

  // Checks, sequences and issues one operation (Note [NCCL streams]); returns its Work.
  std::shared_ptr<Work> Launch(const CollectiveCall& info, const CallOptions& call,
                               const absl::Status& check, std::vector<Tensor> keep,
                               const Body& body);
  absl::Status IssueOnStream(const Body& body, absl::Time deadline, cudaEvent_t end);
  void WatchdogLoop();
  // Fails `failing` (if any) with `cause` and every other pending Work as poisoned, then aborts
  // the NCCL communicator. False if already poisoned.
  bool Poison(const absl::Status& cause, const std::shared_ptr<NcclWork>& failing);
  absl::Status PoisonedError(const std::string& what, const absl::Status& cause) const;
  absl::Status OpFailure(const Pending& op, const absl::Status& why) const;

  const CommunicatorOptions options_;
  const int rank_;
  const int size_;
  const int device_;
  const std::shared_ptr<NcclComm> comm_;
  const CallChecks checks_;
  cudaStream_t stream_ = nullptr;
  float* barrier_buffer_ = nullptr;  // one device float for Barrier

  std::mutex launch_mu_;  // one Launch or Split at a time, so sequence and issue order agree
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;  // guarded by mu_
  absl::Status poison_;          // guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  uint64_t next_seq_ = 1;        // guarded by mu_
  uint64_t next_p2p_seq_ = 1;    // guarded by mu_
  uint64_t splits_ = 0;          // guarded by launch_mu_
  std::thread watchdog_;
};

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Make(
    const CommunicatorOptions& options, std::shared_ptr<NcclComm> comm) {
  std::unique_ptr<NcclCommunicator> out(new NcclCommunicator(options, std::move(comm)));
  ScopedCudaDevice on_device(out->device_);
  RETURN_IF_ERROR(on_device.status());
  PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&out->stream_, cudaStreamNonBlocking));
  PADDLE_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&out->barrier_buffer_), sizeof(float)));
  out->watchdog_ = std::thread([p = out.get()] { p->WatchdogLoop(); });
  return std::unique_ptr<Communicator>(std::move(out));
}

NcclCommunicator::~NcclCommunicator() {
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();  // after the pending operations end; each is bounded by its timeout
  }
  bool healthy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    healthy = poison_.ok();
  }
  if (healthy) {
    absl::Status destroyed = comm_->Destroy(absl::Now() + options_.timeout);
    if (!destroyed.ok()) {
      PADDLE_LOG(WARN, COLL) << "NCCL communicator rank " << rank_ << "/" << size_
                             << ": aborted instead of destroyed: " << destroyed;
    }
  } else {
    comm_->Abort();
  }
  ScopedCudaDevice on_device(device_);
  if (barrier_buffer_ != nullptr) (void)cudaFree(barrier_buffer_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::PoisonedError(const std::string& what,
                                             const absl::Status& cause) const {
  return absl::Status(cause.code(),
                      absl::StrCat(what, " not run or not finished on rank ", rank_, "/", size_,
                                   ": the communicator was aborted; create a new one. The cause: ",
                                   cause.message()));
}

absl::Status NcclCommunicator::OpFailure(const Pending& op, const absl::Status& why) const {
  return ErrorContext()
      .Rank(rank_, size_)
      .Op(op.work->Describe())
      .Bytes(op.bytes)
      .Waited(absl::Now() - op.start, op.timeout)
      .Hint("the communicator was aborted; create a new one")
      .Wrap(why);
}

absl::Status NcclCommunicator::IssueOnStream(const Body& body, absl::Time deadline,
                                             cudaEvent_t end) {
  ScopedCudaDevice on_device(device_);
  RETURN_IF_ERROR(on_device.status());
  cudaEvent_t produced = nullptr;
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  absl::Status status = [&]() -> absl::Status {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaEventRecord(produced, cudaStreamLegacy));
    PADDLE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, produced, 0));
    return absl::OkStatus();
  }();
  (void)cudaEventDestroy(produced);  // the wait is already enqueued
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(comm_->Issue(deadline, [&](ncclComm_t c) { return body(c, stream_); }));
  PADDLE_CUDA_RETURN_IF_ERROR(cudaEventRecord(end, stream_));
  return absl::OkStatus();
}

std::shared_ptr<Work> NcclCommunicator::Launch(const CollectiveCall& info, const CallOptions& call,
                                               const absl::Status& check, std::vector<Tensor> keep,
                                               const Body& body) {
  std::lock_guard<std::mutex> launch_lock(launch_mu_);
  const bool collective = !IsPointToPoint(info.kind);
  Pending op;
  op.name = std::string(OpKindName(info.kind));
  op.bytes = info.bytes;
  op.timeout = call.timeout > absl::ZeroDuration() ? call.timeout : options_.timeout;
  absl::Status poison;
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t& counter = collective ? next_seq_ : next_p2p_seq_;
    op.seq = counter;
    if (check.ok() && poison_.ok()) ++counter;  // a rejected call uses no sequence number
    poison = poison_;
  }
  const std::string description = info.Describe(op.seq);
  if (!check.ok()) {
    auto work = std::make_shared<NcclWork>(description, op.seq, rank_, size_, comm_, nullptr);
    work->Complete(ErrorContext()
                       .Rank(rank_, size_)
                       .Op(op.name, static_cast<int64_t>(op.seq))
                       .Wrap(Annotate(check, description)));
    return work;
  }
  if (!poison.ok()) {
    auto work = std::make_shared<NcclWork>(description, op.seq, rank_, size_, comm_, nullptr);
    work->Complete(PoisonedError(description, poison));
    return work;
  }
  cudaEvent_t end = nullptr;
  absl::Status status = [&]() -> absl::Status {
    ScopedCudaDevice on_device(device_);
    RETURN_IF_ERROR(on_device.status());
    PADDLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
    return absl::OkStatus();
  }();
  op.work = std::make_shared<NcclWork>(description, op.seq, rank_, size_, comm_, end);
  op.keep = std::move(keep);
  op.start = absl::Now();
  if (status.ok()) status = IssueOnStream(body, op.start + op.timeout, end);
  if (!status.ok()) {
    Poison(OpFailure(op, status), op.work);
    return op.work;
  }
  std::shared_ptr<Work> work = op.work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) {
      // Aborted while issuing: the NCCL communicator is gone; this Work can only fail.
      op.work->Complete(PoisonedError(description, poison_));
      return work;
    }
    pending_.push_back(std::move(op));
  }
  cv_.notify_all();
  return work;
}

void NcclCommunicator::WatchdogLoop() {
  ScopedLogRank log_rank(rank_, size_);
  for (;;) {
    std::vector<std::shared_ptr<NcclWork>> works;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoMilliseconds(kWatchdogInterval),
                   [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) {
        if (stopping_) return;
        continue;
      }
      for (const Pending& op : pending_) works.push_back(op.work);
    }
    // Done ones first (Poll completes them), so an error reported after an op finished is not
    // pinned on it.
    std::shared_ptr<NcclWork> failed_by_cuda;
    for (const auto& work : works) {
      if (work->Poll() && !work->status().ok() && failed_by_cuda == nullptr) failed_by_cuda = work;
    }
    absl::Status cause;
    std::shared_ptr<NcclWork> failing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_by_cuda != nullptr) {
        cause = failed_by_cuda->status();
        failing = failed_by_cuda;
      }
      while (!pending_.empty() && pending_.front().work->IsCompleted() && failing == nullptr) {
        pending_.pop_front();  // releases its tensors
      }
      if (failing == nullptr && !pending_.empty()) {
        const Pending& oldest = pending_.front();
        absl::Status async = comm_->AsyncError();
        const absl::Duration waited = absl::Now() - oldest.start;
        if (!async.ok()) {
          cause = OpFailure(oldest, async);
          failing = oldest.work;
        } else if (waited > oldest.timeout) {
          const char* last = ncclGetLastError(nullptr);
          cause = OpFailure(
              oldest, absl::DeadlineExceededError(absl::StrCat(
                          "NCCL operation did not complete within its timeout (a rank that "
                          "never joined it, or a hung GPU; raise PADDLE_TIMEOUT_S or the call's "
                          "timeout if it is only slow); NCCL's state: no error reported",
                          last != nullptr && last[0] != '\0' ? "; NCCL's last error: " : "",
                          last != nullptr ? last : "")));
          failing = oldest.work;
        }
      }
    }
    if (failing != nullptr) Poison(cause, failing);
  }
}

bool NcclCommunicator::Poison(const absl::Status& cause, const std::shared_ptr<NcclWork>& failing) {
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) return false;
    poison_ = cause;
    failed.swap(pending_);
  }
  PADDLE_LOG(WARN, COLL) << "NCCL communicator rank " << rank_ << "/" << size_
                         << " poisoned: " << cause;
  if (failing != nullptr) failing->Complete(cause);
  for (Pending& op : failed) op.work->Complete(PoisonedError(op.work->Describe(), cause));
  // Users see the failure first; the tensors in `failed` stay alive until the abort has stopped
  // the GPU work that may still use them.
  comm_->Abort();
  return true;
}

void NcclCommunicator::Abort(const absl::Status& cause) {
  absl::Status status = cause.ok() ? absl::AbortedError("Abort() called with an OK status") : cause;
  Poison(ErrorContext()
             .Rank(rank_, size_)
             .Hint("the communicator was aborted; create a new one")
             .Wrap(Annotate(status, "aborted")),
         nullptr);
}

// ---- the operations ----

char* Bytes(const Tensor& t) { return static_cast<char*>(t.data()); }

// Grouped sends and receives: block j of `send` (send_counts[j] elements at send_offsets[j]) to
// rank j, block j of `recv` from rank j. Self-exchange is allowed inside a group.
ncclResult_t GroupedExchange(const Tensor& send, const std::vector<int64_t>& send_counts,
                             const Tensor& recv, const std::vector<int64_t>& recv_counts,
                             bool same_send_block, ncclComm_t comm, cudaStream_t stream) {
  const ncclDataType_t type = *NcclDataType(send.dtype());
  const size_t element = send.element_size();
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  int64_t send_offset = 0;
  int64_t recv_offset = 0;
  for (size_t j = 0; j < recv_counts.size() && result == ncclSuccess; ++j) {
    const int peer = static_cast<int>(j);
    const int64_t n_send = same_send_block ? send.numel() : send_counts[j];
    if (n_send > 0) {
      result = ncclSend(Bytes(send) + send_offset * element, static_cast<size_t>(n_send), type,
                        peer, comm, stream);
    }
    if (result == ncclSuccess && recv_counts[j] > 0) {
      result = ncclRecv(Bytes(recv) + recv_offset * element, static_cast<size_t>(recv_counts[j]),
                        type, peer, comm, stream);
    }
    if (!same_send_block) send_offset += send_counts[j];
    recv_offset += recv_counts[j];
  }
  const ncclResult_t ended = ncclGroupEnd();
  return result != ncclSuccess ? result : ended;
}

}  // namespace

std::shared_ptr<Work> NcclCommunicator::Allreduce(Tensor tensor, ReduceOp op, CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Allreduce(tensor, op, &check);
  return Launch(info, call, check, {tensor}, [tensor, op](ncclComm_t c, cudaStream_t s) {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclAllReduce(tensor.data(), tensor.data(), static_cast<size_t>(tensor.numel()),
                         *NcclDataType(tensor.dtype()), *NcclRedOp(op), c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Broadcast(Tensor tensor, int root, CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Broadcast(tensor, root, &check);
  return Launch(info, call, check, {tensor}, [tensor, root](ncclComm_t c, cudaStream_t s) {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclBroadcast(tensor.data(), tensor.data(), static_cast<size_t>(tensor.numel()),
                         *NcclDataType(tensor.dtype()), root, c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Reduce(Tensor tensor, int root, ReduceOp op,
                                               CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Reduce(tensor, root, op, &check);
  return Launch(info, call, check, {tensor}, [tensor, root, op](ncclComm_t c, cudaStream_t s) {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclReduce(tensor.data(), tensor.data(), static_cast<size_t>(tensor.numel()),
                      *NcclDataType(tensor.dtype()), *NcclRedOp(op), root, c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Allgather(Tensor input, Tensor output, CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Allgather(input, output, &check);
  return Launch(info, call, check, {input, output}, [input, output](ncclComm_t c, cudaStream_t s) {
    if (input.numel() == 0) return ncclSuccess;
    return ncclAllGather(input.data(), output.data(), static_cast<size_t>(input.numel()),
                         *NcclDataType(input.dtype()), c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Allgatherv(Tensor input, Tensor output,
                                                   std::vector<int64_t> counts, CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Allgatherv(input, output, counts, &check);
  return Launch(info, call, check, {input, output},
                [input, output, counts](ncclComm_t c, cudaStream_t s) {
                  return GroupedExchange(input, {}, output, counts, true, c, s);
                });
}

std::shared_ptr<Work> NcclCommunicator::ReduceScatter(Tensor input, Tensor output, ReduceOp op,
                                                      CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.ReduceScatter(input, output, op, &check);
  return Launch(
      info, call, check, {input, output}, [input, output, op](ncclComm_t c, cudaStream_t s) {
        if (output.numel() == 0) return ncclSuccess;
        return ncclReduceScatter(input.data(), output.data(), static_cast<size_t>(output.numel()),
                                 *NcclDataType(input.dtype()), *NcclRedOp(op), c, s);
      });
}

std::shared_ptr<Work> NcclCommunicator::Alltoall(Tensor input, Tensor output, CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Alltoall(input, output, &check);
  const std::vector<int64_t> blocks(size_, input.numel() / size_);
  return Launch(info, call, check, {input, output},
                [input, output, blocks](ncclComm_t c, cudaStream_t s) {
                  return GroupedExchange(input, blocks, output, blocks, false, c, s);
                });
}

std::shared_ptr<Work> NcclCommunicator::Alltoallv(Tensor input, Tensor output,
                                                  std::vector<int64_t> send_counts,
                                                  std::vector<int64_t> recv_counts,
                                                  CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.Alltoallv(input, output, send_counts, recv_counts, &check);
  return Launch(info, call, check, {input, output},
                [input, output, send_counts, recv_counts](ncclComm_t c, cudaStream_t s) {
                  return GroupedExchange(input, send_counts, output, recv_counts, false, c, s);
                });
}

std::shared_ptr<Work> NcclCommunicator::Barrier(CallOptions call) {
  CollectiveCall info = checks_.Barrier();
  info.bytes = sizeof(float);
  float* buffer = barrier_buffer_;
  return Launch(info, call, absl::OkStatus(), {}, [buffer](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Send(Tensor tensor, int dst, uint32_t tag,
                                             CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.PointToPoint(true, tensor, dst, tag, &check);
  return Launch(info, call, check, {tensor}, [tensor, dst](ncclComm_t c, cudaStream_t s) {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclSend(tensor.data(), static_cast<size_t>(tensor.numel()),
                    *NcclDataType(tensor.dtype()), dst, c, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::Recv(Tensor tensor, int src, uint32_t tag,
                                             CallOptions call) {
  absl::Status check;
  const CollectiveCall info = checks_.PointToPoint(false, tensor, src, tag, &check);
  return Launch(info, call, check, {tensor}, [tensor, src](ncclComm_t c, cudaStream_t s) {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclRecv(tensor.data(), static_cast<size_t>(tensor.numel()),
                    *NcclDataType(tensor.dtype()), src, c, s);
  });
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Split(std::vector<int> ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    RETURN_IF_ERROR(CheckRankArgument(ranks[i], size_, absl::StrCat("ranks[", i, "]")));
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Split: ranks must be sorted and unique; ranks[", i, "] = ", ranks[i],
                       " follows ", ranks[i - 1]));
    }
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  std::lock_guard<std::mutex> launch_lock(launch_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_.ok()) return PoisonedError("split", poison_);
  }
  const uint64_t split = splits_++;
  const std::string who = absl::StrCat("rank ", rank_, "/", size_, " (split #", split, " into ",
                                       ranks.size(), " ranks) on cuda:", device_);
  ASSIGN_OR_RETURN(std::shared_ptr<NcclComm> child,
                   comm_->Split(index >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, index >= 0 ? index : 0,
                                absl::Now() + options_.connect_timeout, who));
  if (index < 0) return std::unique_ptr<Communicator>();
  CommunicatorOptions options = options_;
  options.rank = index;
  options.world_size = static_cast<int>(ranks.size());
  options.store_prefix = absl::StrCat(options_.store_prefix, "/split", split);
  return Make(options, std::move(child));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommunicatorOptions& options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("NCCL communicator: options.store is null");
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", options.rank,
                                                   " / world size ", options.world_size,
                                                   " is not a valid rank of a group"));
  }
  if (options.timeout <= absl::ZeroDuration() || options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: timeouts must be positive (timeout ",
                     absl::FormatDuration(options.timeout), ", connect_timeout ",
                     absl::FormatDuration(options.connect_timeout), ")"));
  }
  // Before anything touches NCCL: without a driver or GPU, say so in CUDA's words.
  ASSIGN_OR_RETURN(int device_count, CudaDeviceCount());
  if (device_count < 1) {
    return absl::FailedPreconditionError("no CUDA device/driver: no CUDA device is visible");
  }
  ASSIGN_OR_RETURN(int device, SelectDevice(options.rank, device_count));
  const std::string who =
      absl::StrCat("rank ", options.rank, "/", options.world_size, " on cuda:", device);
  ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeUniqueId(options));
  ASSIGN_OR_RETURN(
      std::shared_ptr<NcclComm> comm,
      NcclComm::Init(id, options.rank, options.world_size, device, options.connect_timeout, who));
  PADDLE_LOG(INFO, INIT) << "NCCL communicator ready: " << who;
  return NcclCommunicator::Make(options, std::move(comm));
}

}  // namespace paddle
