// Communicator: one group of ranks and the collectives they run together.
//
// A Communicator is created on every rank of a group from the group's Store (usually from a
// Rendezvous) and owns everything its collectives need: the transport and its I/O thread, the
// thread that runs operations in call order, and its buffers. There are no process globals; two
// communicators in one process are independent. Backends implement this interface:
//   native  our own algorithms (paddle/collective/algorithms) over our transports (TCP, shared
//           memory, UCX; Note [Transport choice]); CUDA tensors by host staging or CUDA IPC;
//   gloo    libgloo's algorithms over Gloo's TCP transport, rendezvousing through our Store;
//   nccl    (GPU) NCCL, its unique id passed through our Store.
//
// Tensors are contiguous, on the CPU or (nccl, and native by staging or IPC) on a CUDA device,
// and stay valid and unchanged (inputs) or untouched (outputs) until the Work completes. Every
// operation has a timeout: the communicator's, or the call's own.
//
// Failure (Note [Communicator failure]): an operation that times out, or a peer that closes or
// fails, poisons the communicator: that Work and every pending and later one fail with a status
// naming this rank, the peer rank and address, the operation, its sequence number and bytes, and
// the time waited. Abort() from any thread does the same at once. A poisoned communicator stays
// poisoned; build a new one (from a new rendezvous) to continue.
//
// Debug checks (Note [Collective debug checks]): with PADDLE_DEBUG_CHECKS=1 (or
// options.debug_checks), Create puts a layer over the backend in which ranks first agree on
// (operation, dtype, count, root, op, sequence number) before each collective; a mismatch fails
// on every rank with a message naming the ranks that disagree and what each passed, instead of a
// hang or garbage. A collective call then returns only once every rank has made it.
#ifndef PADDLE_COLLECTIVE_COMMUNICATOR_H_
#define PADDLE_COLLECTIVE_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/reduction.h"
#include "paddle/collective/work.h"
#include "paddle/core/deadline.h"
#include "paddle/core/tensor.h"

namespace paddle {

class Store;

enum class Backend { kNative, kGloo, kNccl };
absl::string_view BackendName(Backend backend);                // "native", "gloo", "nccl"
absl::StatusOr<Backend> ParseBackend(absl::string_view name);  // error lists the valid names

struct CommunicatorOptions {
  Backend backend = Backend::kNative;
  std::shared_ptr<Store> store;  // the group's store; keys go under `store_prefix`
  std::string store_prefix = "comm";
  int rank = -1;
  int world_size = 0;
  // Default timeout of every operation (PADDLE_TIMEOUT_S).
  absl::Duration timeout = DefaultTimeout(TimeoutKind::kCollective);
  // Time to connect to every peer (PADDLE_CONNECT_TIMEOUT_S).
  absl::Duration connect_timeout = DefaultTimeout(TimeoutKind::kConnect);
  // "auto" | "tcp" (PADDLE_TRANSPORT); native backend only.
  std::string transport = "auto";
  // Algorithm override "ring" | "tree" | "hd" (PADDLE_ALGO); "" = chosen per call by size.
  std::string algorithm;
  // PADDLE_DEBUG_CHECKS=1 also turns this on.
  bool debug_checks = false;
};

// Per-call settings; unset fields use the communicator's.
struct CallOptions {
  absl::Duration timeout = absl::ZeroDuration();  // zero: the communicator's timeout
};

class Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const CommunicatorOptions& options);

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;

  // In place: every rank's `tensor` becomes the element-wise `op` of all ranks' tensors.
  virtual std::shared_ptr<Work> Allreduce(Tensor tensor, ReduceOp op, CallOptions call = {}) = 0;
  // `root`'s tensor is copied into every rank's `tensor`.
  virtual std::shared_ptr<Work> Broadcast(Tensor tensor, int root, CallOptions call = {}) = 0;
  // `root`'s `tensor` becomes the reduction; other ranks' tensors are left unspecified.
  virtual std::shared_ptr<Work> Reduce(Tensor tensor, int root, ReduceOp op,
                                       CallOptions call = {}) = 0;
  // `output` (size x input.numel(), rank-major) receives every rank's `input`.
  virtual std::shared_ptr<Work> Allgather(Tensor input, Tensor output, CallOptions call = {}) = 0;
  // Like Allgather with rank r contributing counts[r] elements (input.numel() == counts[rank]).
  virtual std::shared_ptr<Work> Allgatherv(Tensor input, Tensor output, std::vector<int64_t> counts,
                                           CallOptions call = {}) = 0;
  // `input` has size x output.numel() elements; rank r receives the reduction of block r.
  virtual std::shared_ptr<Work> ReduceScatter(Tensor input, Tensor output, ReduceOp op,
                                              CallOptions call = {}) = 0;
  // Block j of `input` (numel / size elements) goes to rank j's block `rank` of `output`.
  virtual std::shared_ptr<Work> Alltoall(Tensor input, Tensor output, CallOptions call = {}) = 0;
  // send_counts[j] elements go to rank j; recv_counts[j] arrive from rank j (blocks packed in
  // rank order).
  virtual std::shared_ptr<Work> Alltoallv(Tensor input, Tensor output,
                                          std::vector<int64_t> send_counts,
                                          std::vector<int64_t> recv_counts,
                                          CallOptions call = {}) = 0;
  virtual std::shared_ptr<Work> Barrier(CallOptions call = {}) = 0;
  // Point to point; `tag` distinguishes messages between one pair.
  virtual std::shared_ptr<Work> Send(Tensor tensor, int dst, uint32_t tag = 0,
                                     CallOptions call = {}) = 0;
  virtual std::shared_ptr<Work> Recv(Tensor tensor, int src, uint32_t tag = 0,
                                     CallOptions call = {}) = 0;

  // A communicator over `ranks` (sorted, unique, including this rank); every rank of this
  // communicator calls it with the same list, in the same order relative to other operations;
  // ranks not in the list get nullptr (and kOk). The new group's rank i is ranks[i].
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(std::vector<int> ranks) = 0;

  // Poisons the communicator with `cause` (Note [Communicator failure]); safe from any thread.
  virtual void Abort(const absl::Status& cause) = 0;

  // Ends the communicator's use and returns its verdict (torch's destroy_process_group): waits
  // for every operation submitted before it (each within its timeout), then for what the backend
  // still checks after a call returned (native: the ring stamps still on their way, within the
  // communicator's timeout: a job's last call may return before it is compared, Note [Ring
  // stamp]), and returns the first failure: the poison cause, or a call mismatch naming the ranks
  // and their calls. Later calls fail with kFailedPrecondition ("communicator was shut down");
  // a second Shutdown returns the first one's status. The destructor still closes the
  // transport. Default, for backends that check nothing after a call (Gloo, NCCL): OK.
  virtual absl::Status Shutdown() { return absl::OkStatus(); }

 protected:
  Communicator() = default;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_COMMUNICATOR_H_
