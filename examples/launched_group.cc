#include "examples/launched_group.h"

#include <cstdlib>

#include "paddle/core/deadline.h"
#include "paddle/core/error_file.h"
#include "paddle/core/status.h"

namespace paddle::examples {

bool StartedAsGroup() {
  return std::getenv("WORLD_SIZE") != nullptr ||
         (std::getenv("MASTER_ADDR") != nullptr &&
          (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
           std::getenv("SLURM_NTASKS") != nullptr));
}

absl::Status JoinLaunchedGroup(Backend backend, LaunchedGroup* g) {
  ASSIGN_OR_RETURN(g->rendezvous, Rendezvous("env://", DefaultTimeout(TimeoutKind::kStore)));
  CommunicatorOptions options;
  options.backend = backend;
  options.store = g->rendezvous.store;
  options.rank = g->rendezvous.rank;
  options.world_size = g->rendezvous.world_size;
  ASSIGN_OR_RETURN(g->comm, Communicator::Create(options));
  g->rank = g->rendezvous.rank;
  g->world = g->rendezvous.world_size;
  return absl::OkStatus();
}

void FailLaunchedGroup(const absl::Status& cause, LaunchedGroup* g) {
  RecordError(cause, g->rank);  // before the abort: the launcher must see this one first
  if (g->comm != nullptr) g->comm->Abort(cause);
  g->rendezvous.failed = true;
}

}  // namespace paddle::examples
