// CudaSupport with CUDA: the path choice, the staging copies and the dispatch to the IPC
// collectives. See cuda_support.h (Note [CUDA path choice]).
#include "paddle/collective/backends/native/cuda_support.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "paddle/collective/intranode/cuda/cuda_ipc_collectives.h"
#include "paddle/collective/intranode/cuda/cuda_ipc_workspace.h"
#include "paddle/collective/intranode/cuda/ipc_agreement.h"
#include "paddle/collective/intranode/cuda/ipc_reduce_kernel.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/deadline.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {

class CudaCall {
 public:
  ~CudaCall() {
    if (producer == nullptr) return;
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device);
    if (guard.ok()) (void)cudaEventDestroy(producer);  // released once it has fired
  }

  OpKind kind = OpKind::kAllreduce;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int device = 0;
  cudaEvent_t producer = nullptr;
  bool ipc = false;
  std::vector<Tensor> device_tensors;  // the caller's tensors, in the order given
  // Staging: one pinned buffer per StagingRange.
  struct Buffer {
    uintptr_t device_begin = 0;
    size_t bytes = 0;
    bool download = false;
    bool upload = false;
    Tensor host;  // kUInt8, pinned; undefined when bytes == 0
  };
  std::vector<Buffer> buffers;
};

class CudaSupport::Impl {
 public:
  explicit Impl(CudaSupportOptions options) : options_(std::move(options)) {}

  ~Impl() {
    if (!stream_.has_value()) return;
    // Pinned buffers of timed-out operations go back only once every copy is done.
    if (!stream_->Synchronize(Deadline::After(absl::Seconds(30))).ok()) {
      (void)abandoned_.release();  // leaked on purpose: a copy may still write into them
    }
  }

  absl::Status Prepare(OpKind kind, ReduceOp op, int root,
                       const std::vector<CudaCallTensor>& tensors, std::shared_ptr<CudaCall>* out) {
    out->reset();
    ASSIGN_OR_RETURN(const int device, CudaDeviceOf(tensors));
    if (device < 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu_);
    if (device_ >= 0 && device != device_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this communicator moves tensors of cuda:", device_, " (its first CUDA call's device), ",
          "not cuda:", device, "; use one communicator per device"));
    }
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(device);
    if (!guard.ok()) {
      // An argument error: the caller passed a tensor this process cannot reach.
      return absl::InvalidArgumentError(absl::StrCat(
          OpKindName(kind), " got a tensor on cuda:", device,
          ", not in CPU memory, but this process cannot use that device (",
          guard.status().message(),
          "); copy it to the CPU, or run where the GPU is visible (the native and nccl backends "
          "move CUDA tensors)"));
    }
    if (!stream_.has_value()) {
      ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device));
      stream_.emplace(std::move(stream));
    }
    device_ = device;
    auto call = std::make_shared<CudaCall>();
    call->kind = kind;
    call->op = op;
    call->root = root;
    call->device = device;
    PADDLE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&call->producer, cudaEventDisableTiming));
    PADDLE_CUDA_RETURN_IF_ERROR(cudaEventRecord(call->producer, cudaStreamLegacy));
    for (const CudaCallTensor& t : tensors) call->device_tensors.push_back(*t.tensor);

    if (IpcCandidate(kind, op, tensors)) {
      if (path_ == Path::kUndecided) RETURN_IF_ERROR(Decide());
      if (path_ == Path::kIpc) {
        call->ipc = true;
        *out = std::move(call);
        return absl::OkStatus();
      }
    }
    RETURN_IF_ERROR(Stage(tensors, call.get()));
    *out = std::move(call);
    return absl::OkStatus();
  }

  absl::Status Run(const AlgorithmContext& ctx, CudaCall& call,
                   const std::function<absl::Status()>& cpu_body) {
    if (call.ipc) return RunIpc(ctx, call);
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(call.device);
    if (!guard.ok()) return ctx.Fail(guard.status());
    cudaStream_t stream = stream_->get();
    size_t bytes = 0;
    RETURN_IF_ERROR(Check(ctx, cudaStreamWaitEvent(stream, call.producer, 0)));
    for (const CudaCall::Buffer& b : call.buffers) {
      if (!b.download || b.bytes == 0) continue;
      bytes += b.bytes;
      RETURN_IF_ERROR(
          Check(ctx, cudaMemcpyAsync(b.host.data(), reinterpret_cast<void*>(b.device_begin),
                                     b.bytes, cudaMemcpyDeviceToHost, stream)));
    }
    RETURN_IF_ERROR(Drain(ctx, call,
                          absl::StrCat("copying ", bytes,
                                       " bytes of CUDA tensors to "
                                       "pinned host memory (after the producer "
                                       "stream's work)")));
    RETURN_IF_ERROR(cpu_body());
    bytes = 0;
    for (const CudaCall::Buffer& b : call.buffers) {
      if (!b.upload || b.bytes == 0) continue;
      bytes += b.bytes;
      RETURN_IF_ERROR(
          Check(ctx, cudaMemcpyAsync(reinterpret_cast<void*>(b.device_begin), b.host.data(),
                                     b.bytes, cudaMemcpyHostToDevice, stream)));
    }
    return Drain(ctx, call, absl::StrCat("copying ", bytes, " bytes of results back to the GPU"));
  }

  std::string PathDescription() const {
    std::lock_guard<std::mutex> lock(mu_);
    switch (path_) {
      case Path::kUndecided:
        return "undecided";
      case Path::kIpc:
        return "ipc";
      default:
        return absl::StrCat("staging (", staging_reason_, ")");
    }
  }

 private:
  enum class Path { kUndecided, kIpc, kStaging };

  bool IpcCandidate(OpKind kind, ReduceOp op, const std::vector<CudaCallTensor>& tensors) const {
    if (!IsIpcCapable(kind)) return false;
    for (const CudaCallTensor& t : tensors) {
      if (!t.tensor->device().is_cuda()) return false;
    }
    const Tensor& first = *tensors[0].tensor;
    if ((kind == OpKind::kAllreduce || kind == OpKind::kReduceScatter) &&
        !IpcReduceSupports(first.dtype(), op)) {
      return false;
    }
    if (kind == OpKind::kReduceScatter) {
      // The IPC version allows the output to be exactly this rank's input block, no other
      // overlap (the staged CPU path handles any).
      const char* in = static_cast<const char*>(first.data());
      const Tensor& output = *tensors[1].tensor;
      const char* o = static_cast<const char*>(output.data());
      const bool overlaps = o < in + first.nbytes() && in < o + output.nbytes();
      if (overlaps && o != in + static_cast<size_t>(options_.rank) * output.nbytes()) return false;
    }
    return true;
  }

  // Note [CUDA path choice]; under mu_.
  absl::Status Decide() {
    std::string veto;
    absl::StatusOr<CudaIpcSettings> settings = CudaIpcSettingsFromEnv();
    if (!settings.ok()) {
      veto = std::string(settings.status().message());
      settings = CudaIpcSettings{};
    } else {
      veto = LocalIpcVeto(*settings, options_.num_hosts, options_.world_size, kMaxIpcRanks);
    }
    if (options_.world_size == 1 || options_.store == nullptr) {
      path_ = Path::kStaging;
      staging_reason_ = veto.empty() ? "no store" : veto;
      return absl::OkStatus();
    }
    CudaIpcWorkspaceOptions ws;
    ws.device = device_;
    ws.rank = options_.rank;
    ws.world_size = options_.world_size;
    ws.store = options_.store.get();
    ws.store_prefix = absl::StrCat(options_.store_prefix, "/cuda_ipc");
    ws.buffer_bytes = settings->buffer_bytes;
    ws.timeout = options_.connect_timeout;
    ws.local_veto = veto;
    std::string reason;
    absl::StatusOr<std::unique_ptr<CudaIpcWorkspace>> created =
        CudaIpcWorkspace::Create(ws, &reason);
    if (!created.ok()) {
      path_ = Path::kStaging;
      staging_reason_ = created.status().ToString();
      return Annotate(created.status(), "agreeing on the CUDA IPC path");
    }
    workspace_ = *std::move(created);
    path_ = workspace_ != nullptr ? Path::kIpc : Path::kStaging;
    staging_reason_ = reason;
    PADDLE_LOG(INFO, COLL) << "rank " << options_.rank << "/" << options_.world_size
                           << ": CUDA tensors take the "
                           << (path_ == Path::kIpc ? "IPC path" : "staging path: " + reason);
    return absl::OkStatus();
  }

  // Replaces the CUDA tensors by host views of pinned buffers (PlanStaging keeps overlaps).
  absl::Status Stage(const std::vector<CudaCallTensor>& tensors, CudaCall* call) {
    std::vector<size_t> index;  // of the CUDA tensors in `tensors`
    std::vector<uintptr_t> begins;
    std::vector<size_t> bytes;
    std::vector<CudaTensorRole> roles;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].tensor->device().is_cuda()) continue;
      index.push_back(i);
      begins.push_back(reinterpret_cast<uintptr_t>(tensors[i].tensor->data()));
      bytes.push_back(tensors[i].tensor->nbytes());
      roles.push_back(tensors[i].role);
    }
    for (const StagingRange& range : PlanStaging(begins, bytes, roles)) {
      CudaCall::Buffer buffer;
      buffer.device_begin = range.begin;
      buffer.bytes = static_cast<size_t>(range.end - range.begin);
      buffer.download = range.download;
      buffer.upload = range.upload;
      if (buffer.bytes > 0) {
        ASSIGN_OR_RETURN(buffer.host, Tensor::Empty({static_cast<int64_t>(buffer.bytes)},
                                                    DType::kUInt8, PinnedHostAllocator()));
      }
      for (size_t m : range.members) {
        Tensor& t = *tensors[index[m]].tensor;
        Tensor view;
        if (t.nbytes() == 0) {
          ASSIGN_OR_RETURN(view, Tensor::Empty(t.shape(), t.dtype()));
        } else {
          char* host = static_cast<char*>(buffer.host.data()) + (begins[m] - range.begin);
          std::shared_ptr<Storage> keep = buffer.host.storage();
          ASSIGN_OR_RETURN(
              view, Tensor::FromBlob(host, t.shape(), t.dtype(), Device::Cpu(), [keep](void*) {}));
        }
        t = std::move(view);
      }
      call->buffers.push_back(std::move(buffer));
    }
    return absl::OkStatus();
  }

  absl::Status RunIpc(const AlgorithmContext& ctx, CudaCall& call) {
    CudaIpcWorkspace& ws = *workspace_;
    const Tensor& a = call.device_tensors[0];
    switch (call.kind) {
      case OpKind::kAllreduce:
        return CudaIpcAllreduce(ctx, ws, a.data(), a.numel(), a.dtype(), call.op, call.producer);
      case OpKind::kBroadcast:
        return CudaIpcBroadcast(ctx, ws, a.data(), a.numel(), a.dtype(), call.root, call.producer);
      case OpKind::kAllgather:
        return CudaIpcAllgather(ctx, ws, a.data(), call.device_tensors[1].data(), a.numel(),
                                a.dtype(), call.producer);
      case OpKind::kReduceScatter: {
        const Tensor& output = call.device_tensors[1];
        return CudaIpcReduceScatter(ctx, ws, a.data(), output.data(), output.numel(), a.dtype(),
                                    call.op, call.producer);
      }
      default:
        return ctx.Fail(absl::InternalError(
            absl::StrCat(OpKindName(call.kind), " has no CUDA IPC implementation")));
    }
  }

  absl::Status Check(const AlgorithmContext& ctx, cudaError_t e) {
    if (e == cudaSuccess) return absl::OkStatus();
    (void)cudaGetLastError();
    return ctx.Fail(CudaErrorToStatus(e, "CUDA staging copy", __FILE__, __LINE__));
  }

  // Waits for the staging stream with the deadline; on failure keeps the call's pinned buffers
  // out of the allocator for good (a copy may still write into them).
  absl::Status Drain(const AlgorithmContext& ctx, CudaCall& call, const std::string& what) {
    absl::Status s = stream_->Synchronize(ctx.deadline());
    if (s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (CudaCall::Buffer& b : call.buffers) abandoned_->push_back(std::move(b.host));
    }
    return ctx.Fail(Annotate(s, what));
  }

  const CudaSupportOptions options_;
  mutable std::mutex mu_;
  int device_ = -1;
  absl::optional<CudaStream> stream_;
  Path path_ = Path::kUndecided;
  std::string staging_reason_;
  std::unique_ptr<CudaIpcWorkspace> workspace_;
  std::unique_ptr<std::vector<Tensor>> abandoned_ = std::make_unique<std::vector<Tensor>>();
};

CudaSupport::CudaSupport(const CudaSupportOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
CudaSupport::~CudaSupport() = default;

absl::Status CudaSupport::Prepare(OpKind kind, ReduceOp op, int root,
                                  const std::vector<CudaCallTensor>& tensors,
                                  std::shared_ptr<CudaCall>* call) {
  return impl_->Prepare(kind, op, root, tensors, call);
}

absl::Status CudaSupport::Run(const AlgorithmContext& ctx, CudaCall& call,
                              const std::function<absl::Status()>& cpu_body) {
  return impl_->Run(ctx, call, cpu_body);
}

std::string CudaSupport::PathDescription() const { return impl_->PathDescription(); }

}  // namespace paddle
