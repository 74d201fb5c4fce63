// The CUDA IPC collectives; the protocol is Note [CUDA IPC phases] in cuda_ipc_collectives.h.
#include "paddle/collective/intranode/cuda/cuda_ipc_collectives.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "paddle/collective/algorithms/dissemination_barrier.h"
#include "paddle/collective/intranode/cuda/ipc_reduce_kernel.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Steps of one dissemination barrier among at most kMaxIpcRanks ranks: ceil(log2 8).
constexpr uint32_t kBarrierSteps = 3;

// The per-call state: the context, the phase counter that gives each barrier its own steps, and
// the device guard.
class Phases {
 public:
  Phases(const AlgorithmContext& ctx, CudaIpcWorkspace& ws) : ctx_(ctx), ws_(ws) {}

  // Checks the world, makes the device current and orders the stream after the producer.
  absl::Status Start(cudaEvent_t producer) {
    if (ctx_.size() != ws_.size() || ctx_.rank() != ws_.rank()) {
      return ctx_.InvalidArgument(absl::StrCat("the CUDA IPC workspace is rank ", ws_.rank(), "/",
                                               ws_.size(), " but the operation's transport rank ",
                                               ctx_.rank(), "/", ctx_.size()));
    }
    absl::StatusOr<CudaDeviceGuard> guard = CudaDeviceGuard::Create(ws_.device());
    if (!guard.ok()) return ctx_.Fail(guard.status());
    guard_.emplace(*std::move(guard));
    if (producer != nullptr) return Check(cudaStreamWaitEvent(ws_.stream(), producer, 0), "wait");
    return absl::OkStatus();
  }

  // Waits for the stream (with the deadline), then for every rank.
  absl::Status Barrier() {
    RETURN_IF_ERROR(Drain());
    const uint64_t steps = uint64_t{kBarrierSteps} * barriers_++;
    if (steps + kBarrierSteps >= (uint64_t{1} << kTagStepBits)) {
      return ctx_.Fail(absl::OutOfRangeError(
          absl::StrCat("more than ", barriers_, " CUDA IPC phases in one operation; raise ",
                       "PADDLE_CUDA_IPC_BYTES so the tensor takes fewer chunks")));
    }
    return DisseminationBarrier(ctx_.AfterSteps(static_cast<uint32_t>(steps)));
  }

  // Host-side wait for this rank's queued copies and kernels, bounded by the deadline.
  absl::Status Drain() {
    absl::Status s = ws_.cuda_stream().Synchronize(ctx_.deadline());
    if (s.ok()) return s;
    return ctx_.Fail(Annotate(s, "waiting for this rank's CUDA IPC copies and kernels"));
  }

  absl::Status Copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ws_.stream()), "copy");
  }

  absl::Status Reduce(void* out, const std::vector<const void*>& in, int64_t count, DType dtype,
                      ReduceOp op) {
    const absl::Status s = LaunchIpcReduce(out, in.data(), static_cast<int>(in.size()), count,
                                           dtype, op, ws_.stream());
    return s.ok() ? s : ctx_.Fail(s);
  }

  int buffer() { return ws_.NextBuffer(); }

 private:
  absl::Status Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return absl::OkStatus();
    (void)cudaGetLastError();
    return ctx_.Fail(CudaErrorToStatus(e, absl::StrCat("CUDA IPC ", what), __FILE__, __LINE__));
  }

  const AlgorithmContext& ctx_;
  CudaIpcWorkspace& ws_;
  absl::optional<CudaDeviceGuard> guard_;
  uint64_t barriers_ = 0;
};

char* At(void* base, int64_t elements, size_t element_size) {
  return static_cast<char*>(base) + static_cast<size_t>(elements) * element_size;
}
const char* At(const void* base, int64_t elements, size_t element_size) {
  return static_cast<const char*>(base) + static_cast<size_t>(elements) * element_size;
}

// Elements [SliceBegin(k), SliceBegin(k + 1)) of `count` are slice k of n.
int64_t SliceBegin(int64_t count, int k, int n) { return count * k / n; }

}  // namespace

absl::Status CudaIpcAllreduce(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, void* data,
                              int64_t count, DType dtype, ReduceOp op, cudaEvent_t producer) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  if (count == 0) return absl::OkStatus();
  Phases phases(ctx, ws);
  RETURN_IF_ERROR(phases.Start(producer));
  const size_t es = DTypeSize(dtype);
  const int n = ws.size();
  const int me = ws.rank();
  const int64_t chunk = static_cast<int64_t>(ws.buffer_bytes() / es);
  std::vector<const void*> in(static_cast<size_t>(n));
  for (int64_t off = 0; off < count; off += chunk) {
    const int64_t len = std::min(chunk, count - off);
    const int b = phases.buffer();
    RETURN_IF_ERROR(
        phases.Copy(ws.buffer(b, me), At(data, off, es), static_cast<size_t>(len) * es));
    RETURN_IF_ERROR(phases.Barrier());
    const int64_t begin = SliceBegin(len, me, n);
    const int64_t end = SliceBegin(len, me + 1, n);
    for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = At(ws.buffer(b, r), begin, es);
    RETURN_IF_ERROR(phases.Reduce(At(ws.buffer(b, me), begin, es), in, end - begin, dtype, op));
    RETURN_IF_ERROR(phases.Barrier());
    for (int r = 0; r < n; ++r) {
      const int64_t s = SliceBegin(len, r, n);
      const int64_t e = SliceBegin(len, r + 1, n);
      RETURN_IF_ERROR(phases.Copy(At(data, off + s, es), At(ws.buffer(b, r), s, es),
                                  static_cast<size_t>(e - s) * es));
    }
  }
  return phases.Drain();
}

absl::Status CudaIpcBroadcast(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, void* data,
                              int64_t count, DType dtype, int root, cudaEvent_t producer) {
  RETURN_IF_ERROR(ctx.CheckBuffer(data, count, dtype));
  RETURN_IF_ERROR(ctx.CheckRoot(root));
  if (count == 0) return absl::OkStatus();
  Phases phases(ctx, ws);
  RETURN_IF_ERROR(phases.Start(producer));
  const size_t es = DTypeSize(dtype);
  const int64_t chunk = static_cast<int64_t>(ws.buffer_bytes() / es);
  for (int64_t off = 0; off < count; off += chunk) {
    const size_t bytes = static_cast<size_t>(std::min(chunk, count - off)) * es;
    const int b = phases.buffer();
    if (ws.rank() == root)
      RETURN_IF_ERROR(phases.Copy(ws.buffer(b, root), At(data, off, es), bytes));
    RETURN_IF_ERROR(phases.Barrier());
    if (ws.rank() != root)
      RETURN_IF_ERROR(phases.Copy(At(data, off, es), ws.buffer(b, root), bytes));
  }
  return phases.Drain();
}

absl::Status CudaIpcAllgather(const AlgorithmContext& ctx, CudaIpcWorkspace& ws, const void* input,
                              void* output, int64_t count, DType dtype, cudaEvent_t producer) {
  RETURN_IF_ERROR(ctx.CheckBuffer(input, count, dtype));
  if (count == 0) return absl::OkStatus();
  Phases phases(ctx, ws);
  RETURN_IF_ERROR(phases.Start(producer));
  const size_t es = DTypeSize(dtype);
  const int n = ws.size();
  const int64_t chunk = static_cast<int64_t>(ws.buffer_bytes() / es);
  for (int64_t off = 0; off < count; off += chunk) {
    const size_t bytes = static_cast<size_t>(std::min(chunk, count - off)) * es;
    const int b = phases.buffer();
    RETURN_IF_ERROR(phases.Copy(ws.buffer(b, ws.rank()), At(input, off, es), bytes));
    RETURN_IF_ERROR(phases.Barrier());
    for (int r = 0; r < n; ++r) {
      RETURN_IF_ERROR(phases.Copy(At(output, r * count + off, es), ws.buffer(b, r), bytes));
    }
  }
  return phases.Drain();
}

absl::Status CudaIpcReduceScatter(const AlgorithmContext& ctx, CudaIpcWorkspace& ws,
                                  const void* input, void* output, int64_t count, DType dtype,
                                  ReduceOp op, cudaEvent_t producer) {
  RETURN_IF_ERROR(ctx.CheckBuffer(output, count, dtype));
  if (count == 0) return absl::OkStatus();
  Phases phases(ctx, ws);
  RETURN_IF_ERROR(phases.Start(producer));
  const size_t es = DTypeSize(dtype);
  const int n = ws.size();
  const int me = ws.rank();
  // Each chunk holds one piece of every rank's block.
  const int64_t chunk = static_cast<int64_t>(ws.buffer_bytes() / es) / n;
  std::vector<const void*> in(static_cast<size_t>(n));
  for (int64_t off = 0; off < count; off += chunk) {
    const int64_t len = std::min(chunk, count - off);
    const int b = phases.buffer();
    for (int j = 0; j < n; ++j) {
      RETURN_IF_ERROR(phases.Copy(At(ws.buffer(b, me), j * len, es), At(input, j * count + off, es),
                                  static_cast<size_t>(len) * es));
    }
    RETURN_IF_ERROR(phases.Barrier());
    for (int r = 0; r < n; ++r) in[static_cast<size_t>(r)] = At(ws.buffer(b, r), me * len, es);
    RETURN_IF_ERROR(phases.Reduce(At(output, off, es), in, len, dtype, op));
  }
  return phases.Drain();
}

}  // namespace paddle
