// CudaSupport: the native backend on CUDA tensors (the CUDA side of one NativeCommunicator).
//
// Two paths, chosen per communicator (Note [CUDA path choice]):
//   ipc      every rank on one host with a usable GPU: allreduce, broadcast, allgather and
//            reduce-scatter run on the GPU through CUDA IPC scratch buffers
//            (paddle/collective/intranode/cuda/cuda_ipc_collectives.h);
//   staging  everything else, and every operation when IPC is not possible: the CUDA tensors are
//            copied to pinned host buffers, the CPU algorithm runs, the results are copied back.
// CPU tensors never touch CUDA: a communicator that only sees CPU tensors creates no CUDA
// context.
//
// Note [CUDA path choice]
// The choice is made once, at the first call of an IPC-capable operation (allreduce, broadcast,
// allgather, reduce-scatter with a dtype/op pair the kernel handles) whose tensors are all on
// the GPU, on the caller's thread, through the store (Note [CUDA IPC agreement]): if any rank
// cannot (PADDLE_CUDA_IPC=0, several hosts, a world of one or of more than 8, no device, an
// allocation, export or open that fails), all stage. Later calls follow that choice. So: every
// rank of a collective must pass tensors on the same kind of device (all CUDA or all CPU), and
// the first such call blocks its caller until every rank has reached it (at most
// connect_timeout). A communicator uses one CUDA device: that of the first CUDA tensor it sees.
//
// Streams (as Note [NCCL streams]): the call records an event on the legacy default stream (the
// producer); the copies and kernels of the operation run on the communicator's own non-blocking
// stream after it. The Work completes after the host has seen that stream finish, so its results
// may then be used from any stream. Every host wait on the GPU polls with the operation's
// deadline; a timeout there poisons the communicator like a transport timeout, and the pinned
// buffers such an operation used are never reused (a copy may still be writing into them).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_CUDA_SUPPORT_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_CUDA_SUPPORT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/tensor.h"

namespace paddle {

class Store;

enum class CudaTensorRole { kInput, kOutput, kInOut };

struct CudaCallTensor {
  Tensor* tensor;
  CudaTensorRole role;
};

struct CudaSupportOptions {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<Store> store;
  std::string store_prefix;  // keys go under <store_prefix>/cuda_ipc/
  int num_hosts = 1;
  absl::Duration connect_timeout = absl::Seconds(60);
};

// One call's CUDA state (the producer event, the device tensors, the host buffers); opaque.
class CudaCall;

class CudaSupport {
 public:
  explicit CudaSupport(const CudaSupportOptions& options);
  ~CudaSupport();
  CudaSupport(const CudaSupport&) = delete;
  CudaSupport& operator=(const CudaSupport&) = delete;

  // On the caller's thread, after the argument checks. Leaves *call null when no tensor is a
  // CUDA tensor. Otherwise records the producer event and either keeps the tensors for the IPC
  // path or replaces every CUDA tensor in `tensors` by a host view of a pinned buffer (tensors
  // that overlap on the device overlap alike in host memory, so in-place calls stay in place).
  // Errors: kInvalidArgument for tensors on several devices or on another device than the
  // communicator's; CUDA's (kFailedPrecondition without a driver); the agreement's.
  absl::Status Prepare(OpKind kind, ReduceOp op, int root,
                       const std::vector<CudaCallTensor>& tensors, std::shared_ptr<CudaCall>* call);

  // On the operation thread: the IPC collective, or the staging copies around `cpu_body` (which
  // runs the CPU algorithm on the host views Prepare made).
  absl::Status Run(const AlgorithmContext& ctx, CudaCall& call,
                   const std::function<absl::Status()>& cpu_body);

  // "undecided", "ipc" or "staging (<reason>)".
  std::string PathDescription() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Pure helpers, exposed for tests.
// Whether `kind` has an IPC implementation.
bool IsIpcCapable(OpKind kind);

// The device index of the CUDA tensors among `tensors`: -1 if none; kInvalidArgument naming the
// tensors if they are on different devices.
absl::StatusOr<int> CudaDeviceOf(const std::vector<CudaCallTensor>& tensors);

// Byte ranges of the staging buffers: the tensors' ranges [start, start + nbytes) merged where
// they overlap; ranges[i] covers tensors whose index is in members[i].
struct StagingRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool download = false;  // holds an input
  bool upload = false;    // holds an output
  std::vector<size_t> members;
};
std::vector<StagingRange> PlanStaging(const std::vector<uintptr_t>& begins,
                                      const std::vector<size_t>& bytes,
                                      const std::vector<CudaTensorRole>& roles);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_CUDA_SUPPORT_H_
