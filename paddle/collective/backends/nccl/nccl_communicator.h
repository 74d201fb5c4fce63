// NcclCommunicator: the Communicator interface over NCCL, for CUDA tensors.
//
// Note [NCCL backend semantics]
// - Device: the communicator is bound at creation to one CUDA device: PADDLE_CUDA_DEVICE if set,
//   else LOCAL_RANK, else options.rank, taken modulo the number of visible devices. Every tensor
//   must be a contiguous CUDA tensor on that device (kInvalidArgument naming the tensor, its
//   device and the operation otherwise). NCCL (since 2.5) rejects two ranks of one communicator on
//   the same GPU ("Duplicate GPU detected"), so a job needs one GPU per rank.
// - Rendezvous: each creation takes a generation g from a store counter
//   ("<store_prefix>/nccl/joined", incremented by every rank: g = (count - 1) / world size), rank 0
//   publishes ncclGetUniqueId under "<store_prefix>/nccl/<g>/unique_id" and the others wait for it
//   within options.connect_timeout. A store reused for a second communicator with the same prefix
//   thus never hands out the first one's id, provided every rank of each attempt joined (after a
//   failed attempt where some rank never arrived, use a new store_prefix).
// - Init is non-blocking (Note [NCCL non-blocking mode]) and bounded by options.connect_timeout:
//   on expiry the half-made communicator is aborted and Create returns kDeadlineExceeded naming
//   rank, world size and device.
// - Streams (Note [NCCL streams]): the communicator owns one non-blocking CUDA stream. Each call
//   records an event on the legacy default stream (cudaStreamLegacy, what stream `0` means in a
//   default build: the "producer"), makes its own stream wait for it, issues the NCCL operation
//   on its own stream and records an end event there. Work done on the default stream before the
//   call is thus seen by the collective; work on other streams must be synchronized by the caller
//   first. The Work is complete when the end event is; after Wait() the results may be used from
//   any stream.
// - Arithmetic is NCCL's: kAvg is ncclAvg; integer kAvg and bool are kInvalidArgument as in the
//   other backends (CheckReduction); min/max of NaN follow NCCL, not Note [Reduction semantics].
// - Send/Recv: NCCL has no tags; messages between one pair match in the order they were issued.
//   The tag only appears in descriptions. Sending to this rank itself is kInvalidArgument.
// - Failure (Note [Communicator failure]): a watchdog thread checks, while operations are pending,
//   ncclCommGetAsyncError and each pending operation's deadline (the call's timeout, else
//   options.timeout). On an NCCL error or a timed-out operation, or Abort() from any thread, it
//   fails that Work and every pending and later one, naming rank/world, the operation and its
//   sequence number, bytes, time waited and NCCL's error text, then calls ncclCommAbort. The
//   tensors of failed operations are released only after the abort; GPU work that was queued
//   behind a stalled producer may still run once that producer finishes (cudaFree waits for it).
// - Destruction waits for pending operations (each bounded by its timeout), then finalizes and
//   destroys the NCCL communicator (bounded by options.timeout), or aborts it if poisoned.
// - Split uses ncclCommSplit (a collective of this communicator): every rank calls it.
#ifndef PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMMUNICATOR_H_
#define PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"

namespace paddle {

// Creates this rank's NCCL communicator through options.store. Without a usable CUDA device or
// driver: kFailedPrecondition "no CUDA device/driver: ..." before NCCL is touched. Built without
// CUDA: kFailedPrecondition saying so.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommunicatorOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMMUNICATOR_H_
