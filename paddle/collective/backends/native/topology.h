// Where the ranks of a group run: which share a host (and so can share memory), learned through
// the store when a communicator starts.
//
// Each rank publishes its HostIdentity (paddle/collective/transport/shm/host_identity.h) and
// reads everybody's. Hosts are numbered in the order of their lowest rank; local ranks in rank
// order. Every rank computes the same topology from the same keys, so choices made from it
// (shared-memory collectives, the hierarchical allreduce) agree across ranks without another
// exchange.
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_TOPOLOGY_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_TOPOLOGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paddle {

class Store;

struct Topology {
  int num_hosts = 1;
  int host_index = 0;
  int local_rank = 0;
  int local_size = 1;
  std::vector<int> local_ranks;  // the global ranks on this rank's host, ascending
  // Every host runs local_size ranks: the hierarchical allreduce applies.
  bool uniform = true;
  // If uniform: the global rank with this rank's local rank on each host, in host order.
  std::vector<int> cross_ranks;

  // "1 host x 4 ranks", "3 hosts x 2 ranks", "2 hosts, 1 to 3 ranks each".
  std::string Describe() const;
};

// A world of one needs no store. Keys go under `prefix`/host/.
absl::StatusOr<Topology> LearnTopology(Store* store, const std::string& prefix, int rank,
                                       int world_size, absl::Duration timeout);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_TOPOLOGY_H_
