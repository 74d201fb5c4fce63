// The data-parallel group of an example started by the launcher (WORLD_SIZE set) or by
// mpirun/srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS, with MASTER_ADDR exported):
// env:// rendezvous, then one communicator over it. Shared by examples/fashion_mnist and
// examples/ctr.
#ifndef EXAMPLES_LAUNCHED_GROUP_H_
#define EXAMPLES_LAUNCHED_GROUP_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"

namespace paddle::examples {

struct LaunchedGroup {
  RendezvousResult rendezvous;  // owns the store; outlives the communicator below
  std::unique_ptr<Communicator> comm;
  int rank = 0;
  int world = 1;
};

// Whether a launcher, mpirun or srun started this process as one of a group.
bool StartedAsGroup();

// Joins the group with `backend`.
absl::Status JoinLaunchedGroup(Backend backend, LaunchedGroup* g);

// For a rank about to exit on `cause`: records it in the launcher's error file (error_file.h),
// then aborts the communicator with it, so the peers' errors quote this rank's cause instead of
// only "rank R exited" (Note [Communicator failure]), and marks the rendezvous failed, so the
// store's host does not wait for the others on its way out.
void FailLaunchedGroup(const absl::Status& cause, LaunchedGroup* g);

}  // namespace paddle::examples

#endif  // EXAMPLES_LAUNCHED_GROUP_H_
