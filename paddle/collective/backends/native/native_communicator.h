// The native backend: a Communicator (paddle/collective/communicator.h) that runs our own
// collective algorithms (paddle/collective/algorithms) over our own transports
// (paddle/collective/transport; TCP today).
//
// The pieces, each in its own file:
//   native_communicator  the Communicator: argument checks, sequence numbers, one task per call
//   work_queue           the operation thread, QueuedWork, Note [Communicator failure]
//   (paddle/collective/argument_checks: the up-front checks of tensors, counts and ranks)
//   collective_call      what a call asked for, as named in Work::Describe() and errors
//   (debug checks: Communicator::Create's layer over every backend, Note [Collective debug
//   checks])
//
// Settings, each an option with an environment variable (the option wins when it is set):
//   transport      "auto" | "tcp"; "auto" reads PADDLE_TRANSPORT, else TCP
//   algorithm      "" reads PADDLE_ALGO ("ring" | "tree" | "hd"), else the size table
//                  (algorithm_selector.h)
//   timeout        PADDLE_TIMEOUT_S, through DefaultTimeout (paddle/core/deadline.h)
// The ranks of one group must agree on all of them but the timeout; rank 0 publishes its
// choices in the store and the others compare theirs when they connect (an error names both).
//
// Store keys (under options.store_prefix): "config" (those settings), "transport/..." (the
// transport's address exchange), "split<seq>_<hash>/..." (sub-communicators). Two communicators
// on one store need different prefixes.
//
// Behaviour beyond communicator.h:
// - CUDA tensors: staged through pinned host memory, or moved with CUDA IPC among the ranks of
//   one host (cuda_support.h, Note [CUDA path choice]). A CUDA tensor this process cannot reach
//   is an argument error.
// - Argument errors (a non-contiguous tensor, a wrong output size, a bad root, counts that
//   do not add up, an unsupported dtype/op pair) complete the returned Work before the call
//   returns, with kInvalidArgument naming the sizes, dtypes and ranks. They do not poison the
//   communicator, but they use up the call's sequence number, so ranks that all reject the same
//   call stay in step. A call rejected on some ranks only leaves the others waiting until their
//   timeout (with debug checks on, they fail at once instead).
// - Collectives are numbered 1, 2, 3, ... in call order. Send and Recv are numbered apart
//   (their own 1, 2, 3, ...: only two ranks take part), so Work::seq() of a Send or Recv is not
//   comparable with a collective's. Their messages match on (peer, tag) in posting order.
// - The timeout of an operation runs from when it starts on the operation thread, not from the
//   call: operations queued behind a slow one are not charged for the wait.
// - Split runs in call order like a collective (it waits for the operations queued before it)
//   and connects the new group within connect_timeout; failing to connect fails the Split only.
// - The destructor lets the queued operations finish (each bounded by its timeout; at once if the
//   communicator is poisoned), then closes the transport. Wait for your Works, or Abort(), first.
//   Shutdown() first returns the verdict: the poison cause, or a mismatch that only the ring
//   stamps still on their way show (Note [Ring stamp]).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_NATIVE_COMMUNICATOR_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_NATIVE_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"

namespace paddle {

// Connects this rank to the rest of its group (blocks until every rank has connected, within
// options.connect_timeout) and starts the operation thread. options.backend is not looked at.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNativeCommunicator(
    const CommunicatorOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_NATIVE_COMMUNICATOR_H_
