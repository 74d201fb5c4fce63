// The node workspace: one shared-memory segment through which the ranks of one host run their
// collectives without any transport.
//
// Every local rank owns two slots (double buffering) that it alone writes and that every local
// rank may read, plus a progress counter (ShmSignal) that it alone advances. An intra-node
// collective (paddle/collective/intranode/shm_collectives.h) is a sequence of rounds; in each
// round a rank copies its share into its slot, posts progress, waits for its peers' progress and
// reads their slots. Progress values are derived from a round counter that every rank advances
// identically, so a rank always knows which value its peers must have posted (Note [Workspace
// progress] in shm_collectives.cc).
//
// Set-up (Create): local rank 0 creates the segment and publishes its reference under
// `<store_prefix>/segment`; the others open it; each writes its process identity and announces
// itself; rank 0 then stops sharing it (segments have no name, so no process death can leak
// one: Note [Nameless segments] in shm_segment.cc). Failure: a wait ends with an error naming the
// local peer (its global rank and pid) when that peer died, when it aborted (its cause is copied
// into the segment, so the survivors can quote it), when this rank was aborted, or at the deadline.
#ifndef PADDLE_COLLECTIVE_INTRANODE_NODE_WORKSPACE_H_
#define PADDLE_COLLECTIVE_INTRANODE_NODE_WORKSPACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/transport/shm/shm_segment.h"
#include "paddle/collective/transport/shm/shm_signal.h"
#include "paddle/core/deadline.h"

namespace paddle {

class Store;
struct ShmSignal;
struct WorkspaceHeader;
struct WorkspaceRankControl;

// Bytes of one slot with a core per local rank (PADDLE_SHM_SLOT_BYTES overrides; a multiple of
// 4096 from 4096 to 64 MiB; larger when ranks outnumber cores, Note [Sizes when ranks outnumber
// cores] in communicator_settings.cc). Two slots per local rank. Large enough that a round's
// synchronisation costs little next to its copies, small enough that the slots of all ranks stay
// in the last-level cache (Note [Slot size] in node_workspace.cc).
inline constexpr size_t kDefaultSlotBytes = size_t{512} << 10;
inline constexpr char kSlotBytesEnvVar[] = "PADDLE_SHM_SLOT_BYTES";
// Bytes beside each slot for the stamp of the call whose data it holds (round_stamp()).
inline constexpr size_t kRoundStampBytes = 64;
// PADDLE_SHM_SLOT_BYTES, or 0 when it is unset (the communicator then chooses: Note [Sizes when
// ranks outnumber cores] in communicator_settings.cc); kInvalidArgument naming the variable.
absl::StatusOr<size_t> SlotBytesFromEnv();

struct NodeWorkspaceOptions {
  int local_rank = -1;
  int local_size = 0;
  // Global rank of each local rank, and the global world size: for error messages only.
  std::vector<int> global_ranks;
  int world_size = 0;
  std::shared_ptr<Store> store;
  std::string store_prefix = "workspace";
  absl::Duration connect_timeout = DefaultTimeout(TimeoutKind::kConnect);
  size_t slot_bytes = kDefaultSlotBytes;
};

class NodeWorkspace {
 public:
  static absl::StatusOr<std::unique_ptr<NodeWorkspace>> Create(const NodeWorkspaceOptions& options);
  ~NodeWorkspace();
  NodeWorkspace(const NodeWorkspace&) = delete;
  NodeWorkspace& operator=(const NodeWorkspace&) = delete;

  int local_rank() const { return options_.local_rank; }
  int local_size() const { return options_.local_size; }
  size_t slot_bytes() const { return options_.slot_bytes; }
  int global_rank(int local) const { return options_.global_ranks[static_cast<size_t>(local)]; }

  // Slot `buffer` (0 or 1) of local rank `local`: slot_bytes(), 64-byte aligned.
  uint8_t* slot(int local, int buffer) const;
  // kRoundStampBytes beside that slot, in a cache line of their own: like the slot, written by
  // its rank before it posts the slot's data and read by the others after (Note [Agreement
  // check] in paddle/collective/call_stamp.h).
  uint8_t* round_stamp(int local, int buffer) const;

  // The round counter of the collectives: the same on every local rank between operations.
  uint64_t& round() { return round_; }

  // Publishes this rank's progress.
  void Post(uint32_t value);
  // Waits until local rank `local` posted at least `target` (see SignalReached), or fails naming
  // it: died, aborted (with its cause), this rank aborted, or the deadline passed.
  absl::Status WaitFor(int local, uint32_t target, const Deadline& deadline);
  // WaitFor every other local rank.
  absl::Status WaitForPeers(uint32_t target, const Deadline& deadline);

  // Marks this rank aborted with `cause` (first cause wins): its waits and its peers' waits on it
  // fail within ~50 ms. Safe from any thread.
  void Abort(const absl::Status& cause);

 private:
  NodeWorkspace(const NodeWorkspaceOptions& options, std::unique_ptr<ShmSegment> segment,
                absl::Duration spin);
  WorkspaceRankControl& control(int local) const;
  absl::Status CheckPeer(int local) const;
  std::string DescribePeer(int local) const;

  const NodeWorkspaceOptions options_;
  std::unique_ptr<ShmSegment> segment_;
  WorkspaceHeader* header_;
  uint8_t* slots_;
  uint64_t round_ = 0;
  const absl::Duration spin_;
  ShmSpinHistory spin_history_;  // Note [Adaptive spin]
  // Waits in a row that found the awaited peer on this rank's CPU (Note [Ranks glued to one
  // CPU] in node_workspace.cc). Only the thread running the current operation touches it.
  int same_cpu_waits_ = 0;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_NODE_WORKSPACE_H_
