// LearnTopology; see topology.h.
#include "paddle/collective/backends/native/topology.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/shm/host_identity.h"
#include "paddle/core/status.h"

namespace paddle {

std::string Topology::Describe() const {
  if (uniform) {
    return absl::StrCat(num_hosts, num_hosts == 1 ? " host x " : " hosts x ", local_size,
                        local_size == 1 ? " rank" : " ranks");
  }
  return absl::StrCat(num_hosts, " hosts with different numbers of ranks");
}

absl::StatusOr<Topology> LearnTopology(Store* store, const std::string& prefix, int rank,
                                       int world_size, absl::Duration timeout) {
  Topology t;
  t.local_ranks = {rank};
  t.cross_ranks = {rank};
  if (world_size == 1) return t;
  const std::string mine = HostIdentity();
  RETURN_IF_ERROR(Annotate(store->Set(absl::StrCat(prefix, "/host/", rank), mine),
                           "publishing this rank's host identity"));
  std::vector<std::string> hosts(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) {
      hosts[static_cast<size_t>(r)] = mine;
      continue;
    }
    absl::StatusOr<std::string> h = store->Get(absl::StrCat(prefix, "/host/", r), timeout);
    if (!h.ok()) {
      return Annotate(h.status(), absl::StrCat("waiting for rank ", r, "'s host identity"));
    }
    hosts[static_cast<size_t>(r)] = *std::move(h);
  }
  // Hosts in order of their lowest rank.
  std::map<std::string, int> index;
  std::vector<std::vector<int>> members;
  for (int r = 0; r < world_size; ++r) {
    auto [it, inserted] = index.emplace(hosts[static_cast<size_t>(r)], members.size());
    if (inserted) members.emplace_back();
    members[static_cast<size_t>(it->second)].push_back(r);
  }
  t.num_hosts = static_cast<int>(members.size());
  t.host_index = index[mine];
  t.local_ranks = members[static_cast<size_t>(t.host_index)];
  t.local_size = static_cast<int>(t.local_ranks.size());
  t.local_rank = static_cast<int>(std::find(t.local_ranks.begin(), t.local_ranks.end(), rank) -
                                  t.local_ranks.begin());
  t.uniform = std::all_of(members.begin(), members.end(), [&](const std::vector<int>& m) {
    return static_cast<int>(m.size()) == t.local_size;
  });
  t.cross_ranks.clear();
  if (t.uniform) {
    for (const std::vector<int>& m : members) {
      t.cross_ranks.push_back(m[static_cast<size_t>(t.local_rank)]);
    }
  }
  return t;
}

}  // namespace paddle
