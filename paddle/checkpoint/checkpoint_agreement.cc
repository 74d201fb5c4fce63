// AgreeOnCheckpoint, step by step:
//  1. rank 0 runs LoadLatest on its manager: a step (>= 0), or kNoCheckpoint (kNotFound), or
//     kRankZeroFailed (any other error);
//  2. rank 0 broadcasts that int64; on a sentinel every rank returns at once (all know the
//  outcome);
//  3. every other rank reads exactly PathForStep(step) and checks that the file holds that step;
//     a rank that cannot gets no fallback, since any other step would desynchronize the replicas;
//  4. all ranks allgather their outcome (0, or their error's canonical code), so one rank's failure
//     fails every rank with the same verdict instead of a hang at the next collective.
#include "paddle/checkpoint/checkpoint_agreement.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/status.h"
#include "paddle/parallel/reducer/device_memory.h"

namespace paddle {
namespace checkpoint {
namespace {

// What rank 0 broadcasts instead of a step (steps are >= 0).
constexpr int64_t kNoCheckpoint = -1;    // rank 0 has none: every rank starts fresh
constexpr int64_t kRankZeroFailed = -2;  // rank 0's LoadLatest failed other than kNotFound

// `value` of rank 0 on every rank, through `device`.
absl::StatusOr<int64_t> BroadcastFromRankZero(Communicator& comm, int64_t value, Device device) {
  ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({1}, DType::kInt64));
  host.data<int64_t>()[0] = value;
  ASSIGN_OR_RETURN(Tensor on_device, reducer_internal::ToCommDevice(host, device));
  RETURN_IF_ERROR(comm.Broadcast(on_device, /*root=*/0)->Wait());
  ASSIGN_OR_RETURN(Tensor back, reducer_internal::ToHost(on_device));
  return back.data<int64_t>()[0];
}

// Every rank's `value`, in rank order, through `device`.
absl::StatusOr<std::vector<int64_t>> Allgather(Communicator& comm, int64_t value, Device device) {
  ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({1}, DType::kInt64));
  host.data<int64_t>()[0] = value;
  ASSIGN_OR_RETURN(Tensor in, reducer_internal::ToCommDevice(host, device));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({comm.world_size()}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor out, reducer_internal::ToCommDevice(all, device));
  RETURN_IF_ERROR(comm.Allgather(in, out)->Wait());
  ASSIGN_OR_RETURN(Tensor back, reducer_internal::ToHost(out));
  const int64_t* values = back.data<int64_t>();
  return std::vector<int64_t>(values, values + comm.world_size());
}

// Step 3 on a rank other than 0: exactly the checkpoint of `step`, or why not.
absl::StatusOr<LoadedCheckpoint> LoadChosenStep(CheckpointManager& manager, int64_t step) {
  LoadedCheckpoint out;
  out.path = manager.PathForStep(step);
  ASSIGN_OR_RETURN(CheckpointFileContents contents, ReadCheckpointFile(out.path));
  if (contents.step != step) {
    return absl::DataLossError(absl::StrCat("checkpoint ", out.path, " holds step ", contents.step,
                                            ", its name says ", step));
  }
  out.state = std::move(contents.state);
  out.step = step;
  return out;
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> AgreeOnCheckpoint(Communicator& comm, CheckpointManager& manager,
                                                   Device device) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  const std::string who = absl::StrCat("rank ", rank, "/", world);
  if (comm.backend() != Backend::kNccl) device = Device::Cpu();

  absl::StatusOr<LoadedCheckpoint> mine = absl::UnknownError("no checkpoint chosen yet");
  int64_t choice = 0;
  if (rank == 0) {
    mine = manager.LoadLatest();
    choice = mine.ok()                         ? mine->step
             : absl::IsNotFound(mine.status()) ? kNoCheckpoint
                                               : kRankZeroFailed;
  }
  absl::StatusOr<int64_t> step = BroadcastFromRankZero(comm, choice, device);
  if (!step.ok()) {
    return Annotate(step.status(), absl::StrCat(who,
                                                ": broadcasting the checkpoint step to "
                                                "resume from (rank 0 chooses it)"));
  }
  if (*step == kNoCheckpoint) {
    if (rank == 0) return mine.status();
    return absl::NotFoundError(absl::StrCat(
        who, ": rank 0 found no checkpoint to resume from, so no rank resumes (this rank's ",
        "directory ", manager.dir(), " is not consulted)"));
  }
  if (*step == kRankZeroFailed) {
    if (rank == 0) return Annotate(mine.status(), who);
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": rank 0 could not choose a checkpoint to resume from; its error ",
                     "says why (see its log)"));
  }
  if (rank != 0) mine = LoadChosenStep(manager, *step);

  absl::StatusOr<std::vector<int64_t>> outcomes =
      Allgather(comm, mine.ok() ? 0 : static_cast<int64_t>(mine.status().code()), device);
  if (!outcomes.ok()) {
    return Annotate(
        outcomes.status(),
        absl::StrCat(who, ": exchanging whether each rank loaded checkpoint step ", *step));
  }
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if ((*outcomes)[r] != 0) failed.push_back(r);
  }
  if (failed.empty()) return mine;
  const std::string verdict = absl::StrCat(
      "rank(s) ", absl::StrJoin(failed, ", "), " of ", world, " could not load checkpoint step ",
      *step, " (chosen by rank 0), so no rank resumes: every rank needs that step's file, ",
      manager.PathForStep(*step), " on rank ", rank);
  if (!mine.ok()) {
    // kNotFound is reserved for "no checkpoint, start fresh", which this is not.
    const absl::StatusCode code = absl::IsNotFound(mine.status())
                                      ? absl::StatusCode::kFailedPrecondition
                                      : mine.status().code();
    return absl::Status(code, absl::StrCat(who, ": ", mine.status().message(), "; ", verdict));
  }
  return absl::AbortedError(absl::StrCat(who, ": ", verdict, " (their errors say why)"));
}

}  // namespace checkpoint
}  // namespace paddle
