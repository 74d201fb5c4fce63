// Which algorithm runs a collective: chosen per call from the message size and world size by a
// small table (Note [Algorithm table] in algorithm_selector.cc, docs/algorithms.md) or, for
// allreduce, by a fitted cost model (PADDLE_TUNING_PARAMS, Note [Tuned allreduce]), or forced for
// the whole job with PADDLE_ALGO=ring|tree|hd.
//
// The Communicator builds one selector when it starts (`AlgorithmSelector::FromEnv()`, so
// a bad PADDLE_ALGO fails at start-up rather than at the first collective), replaces it by one
// following the allreduce table its rank 0 chose unless an algorithm is forced (AgreeOnTuning in
// backends/native/communicator_settings.h), and runs its allreduces and broadcasts through it:
//
//   ASSIGN_OR_RETURN(AlgorithmSelector selector, AlgorithmSelector::FromEnv());
//   ...
//   RETURN_IF_ERROR(selector.Allreduce(ctx, data, count, dtype, ReduceOp::kAvg));
//
// The other collectives have one algorithm each (RingAllgatherv, RingReduceScatter, TreeReduce,
// PairwiseAlltoallv, DisseminationBarrier) and are called directly. Every rank must choose the
// same algorithm for an operation: the choice depends only on (bytes, world size) and the
// AllreduceTable, which all ranks share (rank 0 publishes the table), and PADDLE_ALGO must be set
// alike on every rank.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_SELECTOR_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_SELECTOR_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/algorithms/allreduce_cost_model.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

enum class Algorithm {
  kRing,             // RingAllreduce, RingBroadcast
  kTree,             // TreeAllreduce (recursive doubling), TreeBroadcast (binomial)
  kHalvingDoubling,  // HalvingDoublingAllreduce; broadcast uses the binomial tree
};

// "ring", "tree", "hd".
absl::string_view AlgorithmName(Algorithm algorithm);
// Accepts the names above, ignoring case; the error lists them.
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);

// The environment variable that forces an algorithm.
inline constexpr char kAlgorithmEnvVar[] = "PADDLE_ALGO";

// Which allreduce table applies (Note [Algorithm table]): every rank of a group must use the same
// one, so the communicator's rank 0 chooses it from its own host and publishes it.
enum class AllreduceTable {
  kCorePerRank,  // each rank has a core: the pipelined ring for large buffers
  kSharedCores,  // ranks outnumber their host's cores: halving-doubling (the ring at n=3)
};

// Allreduces of up to this many bytes on `world_size` ranks run the tree (recursive doubling)
// unless an algorithm is forced: 256 KiB up to 8 ranks, 64 KiB beyond.
int64_t TreeMaxBytes(int world_size);

// "core_per_rank", "shared_cores".
absl::string_view AllreduceTableName(AllreduceTable table);
// Accepts the names above; anything else is kInvalidArgument.
absl::StatusOr<AllreduceTable> ParseAllreduceTable(absl::string_view name);

// The fitted cost model that replaces the allreduce table (Note [Tuned allreduce]).
struct TunedAllreduce {
  std::string entry;  // the tuning file's link name, e.g. "tcp@2"
  LinkCost link;
  int64_t piece_bytes = 0;  // the group's piece size, as the algorithms will cut
};

class AlgorithmSelector {
 public:
  // Follows the table for ranks that each have a core.
  AlgorithmSelector() = default;
  // Follows `table`.
  explicit AlgorithmSelector(AllreduceTable table) : table_(table) {}
  // Uses `forced` for every allreduce; for broadcast, kRing is the chain and kTree and
  // kHalvingDoubling are the binomial tree (a broadcast has nothing to halve).
  explicit AlgorithmSelector(Algorithm forced) : forced_(forced) {}
  // Allreduces follow the cost model `tuned` (`table` stays for what the model does not choose).
  AlgorithmSelector(AllreduceTable table, TunedAllreduce tuned)
      : table_(table), tuned_(std::move(tuned)) {}

  // PADDLE_ALGO unset or empty: the table; "ring", "tree" or "hd": forced; anything else:
  // kInvalidArgument naming the variable, its value and the accepted values.
  static absl::StatusOr<AlgorithmSelector> FromEnv();

  absl::optional<Algorithm> forced() const { return forced_; }
  AllreduceTable table() const { return table_; }
  const absl::optional<TunedAllreduce>& tuned() const { return tuned_; }

  // The algorithm for `bytes` (the whole buffer) on `world_size` ranks.
  Algorithm ForAllreduce(int64_t bytes, int world_size) const;
  Algorithm ForBroadcast(int64_t bytes, int world_size) const;

  // Run the chosen algorithm; see RingAllreduce and RingBroadcast for the contracts.
  absl::Status Allreduce(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                         ReduceOp op) const;
  absl::Status Broadcast(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                         int root) const;

 private:
  absl::optional<Algorithm> forced_;
  AllreduceTable table_ = AllreduceTable::kCorePerRank;
  absl::optional<TunedAllreduce> tuned_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_ALGORITHM_SELECTOR_H_
