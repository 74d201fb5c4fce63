// GlooCommunicator: the Communicator interface over libgloo (Debian's 2022 build, TCP transport).
//
// Gloo brings its own algorithms and TCP transport; this backend brings the rest of the
// Communicator contract (communicator.h): rendezvous through the job's own Store (via
// GlooStoreAdapter), a timeout on every operation, errors as Status with full context (CallGloo)
// and a clean teardown; the call descriptions and argument checks and the queue that runs
// operations in call order with poisoning come from backends/common (and the debug checks are
// the layer that Communicator::Create puts over every backend). It
// exists as a reference and a fallback for the native backend: same interface, an independent
// implementation, so either can check the other.
//
// Note [Gloo backend semantics]
// - Algorithms: Gloo's `gloo::allreduce` with its ring (the default, or options.algorithm "ring")
//   or bcube ("bcube"); other names are kInvalidArgument. Broadcast, reduce, allgather(v),
//   alltoall(v) and barrier use the matching Gloo collective. Gloo has no reduce-scatter with
//   arbitrary reduction functions, so ReduceScatter is an allreduce of a copy of the input
//   followed by a copy of this rank's block: correct for every dtype and op, at twice the traffic
//   of a true reduce-scatter.
// - Arithmetic: every reduction runs our own kernels (paddle/collective/reduction.h) as Gloo's
//   reduction function, so results follow Note [Reduction semantics] exactly as in the native
//   backend: NaN-propagating min/max, wrapping integers, kAvg as a sum divided once at the end.
//   float16 and bfloat16 travel as 2-byte elements and are combined in float32 with one rounding
//   per combining step, like the native backend; nothing is converted around the call. Integer
//   kAvg and any arithmetic on bool are kInvalidArgument (CheckReduction).
// - Data movement (broadcast, allgather, alltoall, send/recv) works for every dtype.
// - Timeouts: each operation passes its timeout (the call's, else options.timeout) to Gloo as the
//   operation's end-to-end timeout; options.connect_timeout bounds the connect, including the
//   store waits (Gloo's own stores ignore that timeout; GlooStoreAdapter does not).
// - Agreement (Note [Agreement check]): before each collective the ranks exchange 48-byte stamps
//   of their calls with every peer, so that a mismatched count, dtype, root, op or operation is
//   kInvalidArgument on every rank instead of Gloo's process abort (its size check throws on its
//   own thread) or a silently wrong result. PADDLE_DEBUG_CHECKS adds the full listing (through
//   Communicator::Create).
// - Failure (Note [Communicator failure]): the first failed operation poisons the communicator,
//   fails every queued operation and closes this rank's connections, so peers blocked on this
//   rank fail at once with kUnavailable naming it instead of waiting for their timeout. Abort()
//   does the same from any thread. One limit comes from Gloo: an operation already inside Gloo
//   cannot be interrupted (closing our own sockets does not wake Gloo's waits, measured), so the
//   in-flight operation fails only when it returns, at the latest at its timeout; queued and
//   later ones fail at once. A poisoned rank also publishes its cause in the store, and a rank
//   that loses a peer or times out adds what the others published to its error (Note [Gloo
//   failure reports]), so every rank's message leads to the first failure, not only to the
//   neighbour that closed last.
// - Teardown: the destructor lets queued operations finish, then meets every rank at a store
//   barrier before closing the connections (Gloo's TCP pairs otherwise race: a rank that closes
//   right after its last operation can make a peer still reading fail with "Connection closed
//   by peer"). Destroy the communicators of all ranks at about the same time; a rank that never
//   arrives costs the others options.timeout, a poisoned rank releases them at once.
// - Keys: everything goes under "<store_prefix>/gloo" in the store; use a fresh store_prefix for
//   each communicator sharing a store (Split derives one per call).
#ifndef PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_COMMUNICATOR_H_
#define PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/backends/common/communicator_operations.h"
#include "paddle/collective/backends/common/work_queue.h"
#include "paddle/collective/backends/gloo/gloo_connection.h"
#include "paddle/collective/backends/gloo/gloo_error.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/work.h"

namespace paddle {

// Connects to the other ranks through options.store and returns the communicator. Errors name the
// ranks that never published their address, the time waited and the setting to change.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const CommunicatorOptions& options);

class GlooCommunicator : public Communicator {
 public:
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Backend backend() const override { return Backend::kGloo; }
  // Waits for the queued operations; the poison cause, if any. Every call compares its stamps
  // before it moves data (Note [Agreement check]), so nothing is left to check after it.
  absl::Status Shutdown() override;

  PADDLE_COMMUNICATOR_OPERATIONS;

 private:
  friend absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
      const CommunicatorOptions& options);

  // The body of an operation, run on the queue thread; `call` carries its sequence number (the
  // Gloo tag) and timeout.
  using Body = std::function<absl::Status(const GlooCallInfo& call)>;

  GlooCommunicator(const CommunicatorOptions& options, int algorithm, GlooConnection connection);

  // Queues `body` (collectives get the next collective sequence number; send/recv their own
  // counter, since only two ranks take part) and returns its Work; failed `args` return a
  // completed Work instead, using no sequence number.
  std::shared_ptr<Work> Enqueue(const CollectiveCall& call, const CallOptions& options,
                                const absl::Status& args, Body body);
  // On the queue thread: the stamps, then `body`.
  WorkQueue::TaskResult RunTask(const CollectiveCall& call, uint64_t seq, absl::Duration timeout,
                                const Body& body);
  // Note [Agreement check]: every rank sends its stamp to every other rank and compares theirs
  // before the call goes to Gloo. A mismatch is kInvalidArgument; `*poison` is set when some
  // rank may not have seen it (alltoallv pair counts only), so this one must poison.
  absl::Status ExchangeStamps(const CollectiveCall& call, const GlooCallInfo& info, bool* poison);
  // The queue's on_poison: publishes the cause and closes this rank's connections.
  void OnPoison(const absl::Status& cause);
  // Note [Gloo failure reports]: what other ranks published when they were poisoned, as
  // "rank 2: CANCELLED: aborted: ..." lines; empty if none did.
  std::string ReportsFromPeers() const;
  std::string FailureKey(int rank) const;

  // Gloo's allreduce of `count` elements at `data` in place, combining with `op` (kAvg sums; the
  // caller divides). Worker thread.
  absl::Status GlooAllreduce(void* data, int64_t count, DType dtype, ReduceOp op,
                             const GlooCallInfo& call);

  const CommunicatorOptions options_;
  const int rank_;
  const int size_;
  const int algorithm_;  // gloo::AllreduceOptions::Algorithm
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // How Gloo's messages name each peer (Note [Gloo peer addresses]), for errors.
  const GlooPeerNames peer_names_;

  const CallChecks checks_;

  std::mutex call_mu_;
  bool shut_down_ = false;     // guarded by call_mu_; later calls fail
  uint64_t next_seq_ = 1;      // guarded by call_mu_; collectives
  uint64_t next_p2p_seq_ = 1;  // guarded by call_mu_; send/recv
  uint64_t splits_ = 0;        // Split calls so far (the caller's thread)
  std::mutex failure_mu_;
  absl::Status failure_;  // guarded by failure_mu_; the first cause, for the destructor
  // Last: its thread runs operations that use everything above; the destructor resets it first.
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_COMMUNICATOR_H_
