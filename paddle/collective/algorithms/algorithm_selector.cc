// The algorithm table and PADDLE_ALGO.
//
// Note [Algorithm table]
// Cost model per algorithm (alpha = latency per message, beta = time per byte, N bytes, n ranks,
// n a power of two for the log terms):
//   allreduce  tree (recursive doubling)  log2(n) alpha + log2(n) N beta
//              halving-doubling           2 log2(n) alpha + 2 (n-1)/n N beta
//              ring                       2 (n-1) alpha + 2 (n-1)/n N beta, pipelined in pieces
//   broadcast  tree (binomial)            log2(n) (alpha + N beta)
//              ring (chain, P pieces)     (n - 2 + P) (alpha + N/P beta)
// Small buffers are all latency: recursive doubling has the fewest rounds. It beats
// halving-doubling while log2(n) alpha > (log2(n) - 2(n-1)/n) N beta: always at n=2 but for the
// reduction, which it does on N instead of N/2; up to N = 4 alpha/beta at n=4, 2.4 alpha/beta at
// n=8, 1.9 at n=16 and 1.5 for large n. So the tree takes buffers up to 256 KiB on up to 8 ranks
// (where the measured crossover lies: docs/performance-notes.md, "Algorithm table"), and up to
// 64 KiB on more, where the crossover falls to 1.5-1.9 alpha/beta. Medium buffers pay for bytes
// too: halving-doubling moves the ring's minimum bytes in log2(n) rounds, but when n is not a power
// of two its fold sends the whole buffer twice more on the folded pairs, so there the ring wins.
// Large buffers: the ring, whose pieces keep every link and the reduction busy at once. A broadcast
// of more than a few pieces runs as a chain: the root sends N once instead of log2(n) times. The
// thresholds below are where those terms cross for alpha ~ 20-50 us and beta ~ 1/(1-2 GB/s) (TCP on
// loopback or a 10-25 Gb/s link); measure and adjust the rows for other fabrics. World size 1 never
// sends anything, whatever the row.
//
// That model assumes a rank runs whenever its bytes arrive. When ranks outnumber the cores of
// their host (AllreduceTable::kSharedCores, chosen by the communicator's rank 0) a wait for a
// rank that is not running is a futex sleep and a context switch. The ring chains every rank to
// its predecessor for every piece; halving-doubling pairs ranks off and finishes one segment
// (p2 pieces, 1 MiB at n=4) before the next, which then stays in cache. Measured, halving-doubling
// wins there from 2 MiB up at every n but 3, even when a fold is needed; at n=3 the ring's chain
// is short and the fold makes two of the three ranks move the whole buffer twice more
// (docs/performance-notes.md, "Algorithm table"). So shared cores give every group but n=3
// halving-doubling at every size above the tree's.
#include "paddle/collective/algorithms/algorithm_selector.h"

#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/algorithms/halving_doubling_allreduce.h"
#include "paddle/collective/algorithms/ring_allreduce.h"
#include "paddle/collective/algorithms/ring_broadcast.h"
#include "paddle/collective/algorithms/tree_allreduce.h"
#include "paddle/collective/algorithms/tree_broadcast.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

// The first row whose max_bytes is >= the buffer's bytes applies.
struct TableRow {
  int64_t max_bytes;
  Algorithm power_of_two;  // world size a power of two
  Algorithm other;         // any other world size
};

// Allreduce buffers up to this size go to the tree (recursive doubling), whatever the table;
// see TreeMaxBytes.
constexpr int64_t kSmallGroupTreeMaxBytes = int64_t{256} << 10;  // up to 8 ranks
constexpr int64_t kLargeGroupTreeMaxBytes = int64_t{64} << 10;   // more ranks

constexpr TableRow kAllreduceTable[] = {
    {int64_t{4} << 20, Algorithm::kHalvingDoubling, Algorithm::kRing},
    {kUnlimited, Algorithm::kRing, Algorithm::kRing},
};

constexpr TableRow kBroadcastTable[] = {
    {int64_t{1} << 20, Algorithm::kTree, Algorithm::kTree},
    {kUnlimited, Algorithm::kRing, Algorithm::kRing},
};

template <size_t kRows>
Algorithm Lookup(const TableRow (&table)[kRows], int64_t bytes, int world_size) {
  const bool power_of_two = world_size > 0 && (world_size & (world_size - 1)) == 0;
  for (const TableRow& row : table) {
    if (bytes <= row.max_bytes) return power_of_two ? row.power_of_two : row.other;
  }
  return Algorithm::kRing;  // unreachable: the last row is unlimited
}

struct AlgorithmNames {
  Algorithm algorithm;
  absl::string_view name;
};

constexpr AlgorithmNames kAlgorithmNames[] = {
    {Algorithm::kRing, "ring"},
    {Algorithm::kTree, "tree"},
    {Algorithm::kHalvingDoubling, "hd"},
};

// The buffer's bytes for the table; saturates instead of overflowing (the algorithm then rejects
// the count with a proper error).
int64_t BufferBytes(int64_t count, DType dtype) {
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  if (count <= 0 || size == 0) return 0;
  return count > kUnlimited / size ? kUnlimited : count * size;
}

}  // namespace

absl::string_view AlgorithmName(Algorithm algorithm) {
  for (const AlgorithmNames& entry : kAlgorithmNames) {
    if (entry.algorithm == algorithm) return entry.name;
  }
  return "invalid";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  for (const AlgorithmNames& entry : kAlgorithmNames) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(name), entry.name)) {
      return entry.algorithm;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective algorithm \"", name,
      "\"; expected ring (pipelined ring), tree (recursive doubling / binomial tree) or hd "
      "(halving-doubling)"));
}

absl::string_view AllreduceTableName(AllreduceTable table) {
  return table == AllreduceTable::kSharedCores ? "shared_cores" : "core_per_rank";
}

absl::StatusOr<AllreduceTable> ParseAllreduceTable(absl::string_view name) {
  for (AllreduceTable table : {AllreduceTable::kCorePerRank, AllreduceTable::kSharedCores}) {
    if (name == AllreduceTableName(table)) return table;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown allreduce table \"", name,
                                                 "\"; expected core_per_rank or shared_cores"));
}

absl::StatusOr<AlgorithmSelector> AlgorithmSelector::FromEnv() {
  // The settings table checks the name against ring, tree and hd.
  ASSIGN_OR_RETURN(std::optional<std::string> value, ChoiceSetting(kAlgorithmEnvVar));
  if (!value.has_value()) return AlgorithmSelector();
  ASSIGN_OR_RETURN(Algorithm algorithm, ParseAlgorithm(*value));
  return AlgorithmSelector(algorithm);
}

int64_t TreeMaxBytes(int world_size) {
  return world_size <= 8 ? kSmallGroupTreeMaxBytes : kLargeGroupTreeMaxBytes;
}

// Note [Tuned allreduce]
// With PADDLE_TUNING_PARAMS naming a file from `tools/simulate tune --emit`, the communicator's
// rank 0 takes the file's link for the transport it found at start-up and its ranks per host
// (AgreeOnTuning) and publishes it, so every rank holds the same four numbers. Each allreduce
// then runs the algorithm the cost model (allreduce_cost_model.h, the simulator's formulas)
// predicts fastest for its bytes and world size, instead of the table above; PADDLE_ALGO still
// forces one. Without the variable, or without an entry for the transport, the table applies.
Algorithm AlgorithmSelector::ForAllreduce(int64_t bytes, int world_size) const {
  if (forced_.has_value()) return *forced_;
  if (tuned_.has_value()) {
    switch (ModelAllreduceChoice(tuned_->link, world_size, bytes, tuned_->piece_bytes)) {
      case ModelAlgorithm::kTree:
        return Algorithm::kTree;
      case ModelAlgorithm::kHalvingDoubling:
        return Algorithm::kHalvingDoubling;
      case ModelAlgorithm::kRing:
        return Algorithm::kRing;
    }
  }
  if (bytes <= TreeMaxBytes(world_size)) return Algorithm::kTree;
  if (table_ == AllreduceTable::kSharedCores) {
    return world_size == 3 ? Algorithm::kRing : Algorithm::kHalvingDoubling;
  }
  return Lookup(kAllreduceTable, bytes, world_size);
}

Algorithm AlgorithmSelector::ForBroadcast(int64_t bytes, int world_size) const {
  if (forced_.has_value())
    return *forced_ == Algorithm::kRing ? Algorithm::kRing : Algorithm::kTree;
  return Lookup(kBroadcastTable, bytes, world_size);
}

absl::Status AlgorithmSelector::Allreduce(const AlgorithmContext& ctx, void* data, int64_t count,
                                          DType dtype, ReduceOp op) const {
  switch (ForAllreduce(BufferBytes(count, dtype), ctx.size())) {
    case Algorithm::kRing:
      return RingAllreduce(ctx, data, count, dtype, op);
    case Algorithm::kTree:
      return TreeAllreduce(ctx, data, count, dtype, op);
    case Algorithm::kHalvingDoubling:
      return HalvingDoublingAllreduce(ctx, data, count, dtype, op);
  }
  return ctx.InvalidArgument("invalid algorithm");
}

absl::Status AlgorithmSelector::Broadcast(const AlgorithmContext& ctx, void* data, int64_t count,
                                          DType dtype, int root) const {
  if (ForBroadcast(BufferBytes(count, dtype), ctx.size()) == Algorithm::kRing) {
    return RingBroadcast(ctx, data, count, dtype, root);
  }
  return TreeBroadcast(ctx, data, count, dtype, root);
}

}  // namespace paddle
