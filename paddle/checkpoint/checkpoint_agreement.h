// AgreeOnCheckpoint: every rank of a data-parallel job resumes from the same checkpoint step.
//
// Ranks that each call CheckpointManager::LoadLatest can resume from different steps without
// noticing: a rank whose newest file is missing or corrupt falls back to an older one while the
// others do not, and the replicas then train on different data positions and optimizer states.
// Here rank 0 alone picks the step (its LoadLatest, with the usual fallback past corrupt files),
// broadcasts it, and every other rank loads that exact step from its own manager, with no
// fallback. Then the ranks exchange their outcomes, so either every rank returns the same step or
// every rank returns an error naming the ranks that could not load it.
//
//   absl::StatusOr<LoadedCheckpoint> resumed = AgreeOnCheckpoint(*comm, manager, device);
//   if (absl::IsNotFound(resumed.status())) { /* rank 0 has no checkpoint: all start fresh */ }
//
// The ranks may share one directory (rank 0 saves, all read) or have one each holding the same
// steps (the step's file name is the same in every directory).
#ifndef PADDLE_CHECKPOINT_CHECKPOINT_AGREEMENT_H_
#define PADDLE_CHECKPOINT_CHECKPOINT_AGREEMENT_H_

#include "absl/status/statusor.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/device.h"

namespace paddle {
namespace checkpoint {

// Collective: every rank of `comm` calls it, with its own manager. Returns on every rank
//   - the checkpoint of the step rank 0 chose (rank 0's `skipped` lists what it fell back past);
//   - kNotFound when rank 0 has no loadable checkpoint (every rank starts fresh);
//   - an error on every rank, never kNotFound, when rank 0 could not choose (its LoadLatest
//     failed otherwise) or a rank could not load the chosen step: the failing rank's own error,
//     annotated, and on the others an error naming the failed ranks and the step;
//   - the communicator's error (naming this step of the protocol) if a collective fails.
// `device` is where an NCCL communicator needs its tensors (the model's CUDA device); other
// backends use host tensors and ignore it. Uses two small collectives: a broadcast and an
// allgather of one int64 each, with the communicator's timeout.
absl::StatusOr<LoadedCheckpoint> AgreeOnCheckpoint(Communicator& comm, CheckpointManager& manager,
                                                   Device device = Device::Cpu());

}  // namespace checkpoint
}  // namespace paddle

#endif  // PADDLE_CHECKPOINT_CHECKPOINT_AGREEMENT_H_
