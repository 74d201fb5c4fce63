// DebugCheckCommunicator: the debug mode of Note [Collective debug checks] as a layer over any
// Communicator, as c10d's ProcessGroupWrapper is over any ProcessGroup.
//
// Communicator::Create wraps every communicator it makes in one when PADDLE_DEBUG_CHECKS=1 (or
// CommunicatorOptions::debug_checks) and the group has more than one rank; the backends (native,
// Gloo, NCCL) know nothing of it. Before each collective and Split it describes the call with
// CallChecks, using the backend's own rule for tensors, runs CheckCallAcrossRanks over a TCP
// transport of its own (the check channel, connected through the group's store beside whatever
// the backend moves data with), and only then hands the call to the wrapped communicator. Send
// and Recv pass straight through.
//
// Contract, beyond communicator.h's:
// - The check runs on the caller's thread: a collective call returns once every rank has made its
//   own call and the ranks agree (or the check failed), not at once. The backend then runs the
//   call as usual; NCCL is still called from the caller's thread, so its stream order holds.
// - A disagreement fails the call on every rank with kInvalidArgument naming the ranks and what
//   each passed; the call reaches no backend and the communicator stays usable. A call that this
//   rank's own argument checks reject still takes part in the check, so that the other ranks fail
//   with the listing; this rank gets its own argument error, worded as the backends word it.
// - A failure of the check channel (a peer that left, a timeout) aborts the wrapped communicator
//   with that error (Note [Communicator failure]), and Abort() aborts both. Once the wrapped
//   communicator is known to be poisoned (by Abort, by the check channel, or by a Work of it seen
//   failing), calls skip the check and meet the backend's own poisoned error at once, and the
//   check channel is closed so that peers blocked in a check fail at once too.
// - Sequence numbers (Note [Debug-check sequence numbers] in the .cc) are the native backend's:
//   every collective call that reaches the backend, rejected ones and Split included. Gloo and
//   NCCL number only the collectives they accept, so after a rejected call or a Split their own
//   #k is lower than the check's.
// - Split checks the rank list (every rank calls it), splits the wrapped communicator and wraps
//   the new one, with a check channel of its own.
// - Thread-safety: as the wrapped communicator's; collectives issued from several threads are
//   checked one at a time, in the order they take the lock.
#ifndef PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECK_COMMUNICATOR_H_
#define PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECK_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/backends/common/communicator_operations.h"
#include "paddle/collective/backends/common/debug_checks.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

class DebugCheckCommunicator final : public Communicator {
 public:
  // Wraps `inner`, made from `options`: connects the check channel under `store_prefix` in
  // options.store, within options.connect_timeout (every rank of the group calls this). `accepts`
  // is the backend's rule for tensors, so that this layer rejects a call exactly where the backend
  // will. An error names the rank and what failed; `inner` is then aborted and dropped.
  static absl::StatusOr<std::unique_ptr<Communicator>> Wrap(std::unique_ptr<Communicator> inner,
                                                            const CommunicatorOptions& options,
                                                            CallChecks::TensorCheck accepts,
                                                            std::string store_prefix);
  ~DebugCheckCommunicator() override;

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Backend backend() const override { return inner_->backend(); }
  // The wrapped communicator's verdict: every check ran before its call was forwarded, so its
  // operations and their stamps are all there is left to wait for. Later calls go straight to
  // it, which refuses them: a check would let a rank that failed it break the others' channel.
  absl::Status Shutdown() override {
    shut_down_ = true;
    return inner_->Shutdown();
  }

  PADDLE_COMMUNICATOR_OPERATIONS;

 private:
  DebugCheckCommunicator(std::unique_ptr<Communicator> inner, const CommunicatorOptions& options,
                         CallChecks::TensorCheck accepts, std::string store_prefix,
                         std::unique_ptr<Transport> channel);

  // Runs the check of `call` (whose argument checks gave `args`) within `timeout`, as sequence
  // number *seq. OK: hand the call to the backend (also when every rank's `args` failed alike:
  // the backend reports its own argument error). Otherwise the call's failed status.
  absl::Status Check(const CollectiveCall& call, const absl::Status& args, absl::Duration timeout,
                     uint64_t* seq);
  // A collective: the check, then `forward` (the wrapped communicator's call), or a failed Work.
  std::shared_ptr<Work> CheckThenForward(const CollectiveCall& call, const absl::Status& args,
                                         const CallOptions& options,
                                         absl::FunctionRef<std::shared_ptr<Work>()> forward);
  // Remembers a Work of the wrapped communicator, to learn when it has been poisoned.
  std::shared_ptr<Work> Track(std::shared_ptr<Work> work);
  // Forgets the tracked Works that have completed, keeping the first failure that poisoned.
  void ForgetCompletedLocked();
  // Whether the wrapped communicator is known to be poisoned (closes the channel if so).
  bool InnerPoisoned();
  // The check can no longer run: closes the check channel with `cause` and, when `abort_inner`,
  // aborts the wrapped communicator too.
  void Break(const absl::Status& cause, bool abort_inner);

  // Destroyed last: the wrapped communicator (declared below) goes first, while the channel
  // still exists for any check a peer is still in.
  std::unique_ptr<Transport> channel_;
  TransportExchange exchange_;
  const CommunicatorOptions options_;
  const CallChecks checks_;
  const CallChecks::TensorCheck accepts_;
  const std::string store_prefix_;  // of the check channel, and of the splits' channels
  const std::string owner_;         // "rank 1/4"
  std::atomic<bool> broken_{false};
  std::atomic<bool> shut_down_{false};

  std::mutex check_mu_;    // one check (and its forward) at a time, in sequence order
  uint64_t next_seq_ = 1;  // guarded by check_mu_
  std::mutex works_mu_;
  std::vector<std::shared_ptr<Work>> in_flight_;  // guarded by works_mu_
  absl::Status inner_failure_;                    // guarded by works_mu_

  std::unique_ptr<Communicator> inner_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECK_COMMUNICATOR_H_
