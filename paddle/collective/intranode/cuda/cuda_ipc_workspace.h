// CudaIpcWorkspace: the device scratch buffers that the ranks of one host share through CUDA IPC,
// for the collectives of cuda_ipc_collectives.h.
//
// Each rank cudaMallocs two scratch buffers (PADDLE_CUDA_IPC_BYTES each, 64 MiB by default) once,
// exports them with cudaIpcGetMemHandle and opens every peer's with cudaIpcOpenMemHandle
// (cudaIpcMemLazyEnablePeerAccess), all at creation, through the group's store: no handle travels
// per call, and since the scratch buffers are whole allocations their handles need no base
// address arithmetic (user tensors may live anywhere inside a caching allocator's block; they are
// copied into and out of the scratch instead). Only the CUDA runtime API is used.
//
// Note [CUDA IPC agreement]
// Every rank must take the IPC path or none: one rank that cannot (no device, PADDLE_CUDA_IPC=0,
// more than kMaxIpcRanks ranks, an allocation or an export or an open that fails) would leave the
// others waiting. Create therefore runs two rounds through the store, each rank publishing a vote
// and reading everyone's (keys <prefix>/offer/<rank> and <prefix>/open/<rank>):
//   1. "ok <handle0> <handle1>" after allocating and exporting, else "no <reason>";
//   2. if every offer was ok: open every peer's handles, vote "ok" or "no <reason>";
//   3. if any vote of round 2 is "no": close what was opened, publish <prefix>/closed/<rank> and
//      wait for everyone's before freeing (an exporter must not free memory a peer has open).
// Every rank sees the same votes, so every rank returns a workspace or every rank returns
// nullptr with the same first "no" as the reason. A store error or timeout (a rank that never
// joins) is an error instead.
//
// Several processes on ONE device: cudaIpcOpenMemHandle's documentation restricts handles "from
// each device in a given process" to be opened "by one context per device per other process"; it
// does not forbid the importer being on the exporter's device, so ranks sharing one GPU in
// different processes can open each other's buffers (opening a handle in the process that
// exported it is what fails, which is why multi-rank tests of this path use processes).
#ifndef PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_WORKSPACE_H_
#define PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_WORKSPACE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/core/cuda/cuda_stream.h"

namespace paddle {

class Store;

struct CudaIpcWorkspaceOptions {
  int device = 0;
  int rank = 0;
  int world_size = 1;
  Store* store = nullptr;  // must outlive Create
  std::string store_prefix;
  size_t buffer_bytes = size_t{64} << 20;
  absl::Duration timeout = absl::Seconds(60);
  // Why this rank cannot take the IPC path ("" if it can, as far as it knows before allocating):
  // its vote of round 1 is then "no <reason>" without touching the device.
  std::string local_veto;
};

class CudaIpcWorkspace {
 public:
  // Note [CUDA IPC agreement]. Returns nullptr (and sets *fallback_reason) when some rank voted
  // no; an error when the store failed or a rank did not vote within options.timeout.
  static absl::StatusOr<std::unique_ptr<CudaIpcWorkspace>> Create(
      const CudaIpcWorkspaceOptions& options, std::string* fallback_reason);

  CudaIpcWorkspace(const CudaIpcWorkspace&) = delete;
  CudaIpcWorkspace& operator=(const CudaIpcWorkspace&) = delete;
  // Closes the peers' handles, then frees its own buffers (after its stream is idle).
  ~CudaIpcWorkspace();

  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  cudaStream_t stream() const { return stream_.get(); }
  const CudaStream& cuda_stream() const { return stream_; }

  // The scratch buffer `buffer` (0 or 1) of `rank`, as a pointer usable on this device.
  void* buffer(int buffer, int rank) const {
    return buffers_[static_cast<size_t>(buffer)][static_cast<size_t>(rank)];
  }
  // Which buffer the next chunk uses: chunks alternate between the two buffers across calls
  // (Note [CUDA IPC phases]); every rank advances it identically.
  int NextBuffer() { return static_cast<int>(epoch_++ & 1); }

 private:
  CudaIpcWorkspace(int device, int rank, int size, size_t buffer_bytes, CudaStream stream);

  int device_;
  int rank_;
  int size_;
  size_t buffer_bytes_;
  CudaStream stream_;
  // buffers_[b][r]: own allocation at r == rank_, opened IPC mappings elsewhere (null if not).
  std::vector<void*> buffers_[2];
  uint64_t epoch_ = 0;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_CUDA_CUDA_IPC_WORKSPACE_H_
