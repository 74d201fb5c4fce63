// The data of the collectives benchmark: inputs made from (seed, rank, index) and the check of
// every output element, shared by our own workers and the MPI peer so both move and verify the
// very same numbers.
//
// Element i of rank r's input is a small integer from word i of Philox(seed, r): (w % 17) - 8
// (uint8: w % 17). Sums over up to 15 ranks then stay exact in every dtype, float16 and bfloat16
// included (they hold integers up to 256 exactly), so a result is either bit-exact or wrong,
// whatever order an algorithm adds in, and "#wrong" counts real errors, as in nccl-tests.
//
// Note [Sparse large inputs]: only the first kDenseElements elements and every kSparseStride-th
// chunk of kInputChunk elements after them are drawn from Philox; every other element is 0. A
// sweep to 256 MiB otherwise spent most of its time, not in the operations, but making inputs and
// expected outputs: a 4-rank alltoall at 256 MiB took 20 s of which 0.4 s were the 4 operations
// (each rank draws its whole input twice and every peer's block once; an allreduce check draws
// every rank's whole input). With the rule, a 256 MiB input draws 31 MiB worth of words and the
// zeros are checked as strictly as the rest (every element, memcmp against zeros), so a block
// put in the wrong place is still caught. Which elements are drawn depends on the element's index
// alone, never on the size, so a prefix made for one size stays right for the next (the PyTorch
// peer relies on it), and sizes up to 16 MiB of float32 are drawn in full as before. The values
// do not change an operation's speed: no implementation here compresses or skips zeros.
#ifndef BENCH_COLLECTIVES_BENCH_INPUTS_H_
#define BENCH_COLLECTIVES_BENCH_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace bench {

// Note [Sparse large inputs]: element i of an input is drawn iff InputIsDrawn(i), else it is 0.
constexpr int64_t kInputChunk = 4096;
constexpr int64_t kDenseElements = int64_t{1} << 22;
constexpr int64_t kSparseStride = 16;
inline bool InputIsDrawn(int64_t i) {
  return i < kDenseElements || (i / kInputChunk) % kSparseStride == 0;
}

// The collectives the benchmark knows, with nccl-tests' meaning of "count": the elements of the
// tensor an allreduce or broadcast works on, of the gathered output (allgather), or of the
// scattered input (reduce_scatter), or of what each rank sends and receives in all (alltoall:
// block j of rank r's input goes to rank j, as nccl-tests counts it). The last three need a count
// divisible by the world size.
enum class BenchOp { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kAlltoall };

// Whether `op` splits its count into one block per rank (so the count must divide evenly).
bool SplitsByRank(BenchOp op);

absl::string_view BenchOpName(BenchOp op);  // "allreduce", ...
bool ParseBenchOp(absl::string_view name, BenchOp* op);

// The iterations (or warm-up iterations) to run for a message of `bytes`, given `iters` for
// large ones: messages under 64 KiB run up to 16x more (4 KiB: 16x), because each takes only
// microseconds and one scheduler stall of a few hundred microseconds among 20 would decide their
// mean. Every implementation (ours and the peers) uses this rule, so they run the same counts.
int IterationsFor(int iters, int64_t bytes);

// Note [Sweep budget]: full sweeps to 256 MiB would spend nearly all their time on the largest
// sizes (each doubling doubles the time of every operation). Two opt-in rules bound that, and
// every implementation (ours, the MPI and PyTorch peers) applies them from its flags alone, never
// from a clock, so all ranks of a run agree on every size and count:
//   - `coarse_from` > 0: sizes step by 4x instead of 2x once they reach it (NextSweepBytes);
//   - `budget_bytes` > 0: a size above it runs iters x budget_bytes / bytes operations, at least
//     kMinBudgetIters (or `iters` when smaller), and warmups alike, at least one (OSU's smaller
//     iteration count for large messages), so each size moves about iters x budget_bytes bytes.
// 0 for either keeps the plain rule (powers of two, IterationsFor). Two is enough where the floor
// applies (64 MiB and up with a 4 MiB budget): one operation there takes 0.1 s or more, far above
// a scheduler stall, and the spread comes from the rounds.
constexpr int kMinBudgetIters = 2;

// Note [Checked first run]: the first operation of each size runs on the freshly made inputs, is
// checked (CountWrong), and counts as the first warm-up; the remaining warm-ups, a barrier and the
// timed operations follow. A separate checked operation after the timed ones (on inputs made
// again) cost one more operation per size, a quarter of the operations at 64 and 256 MiB where
// the budget leaves two timed ones and one warm-up, and those sizes are most of a full sweep's
// time. Every implementation (ours, the MPI and PyTorch peers) does the same.
//
// Note [Barrier after the timed loop]: a rank that leaves its timed loop early goes on to the next
// size's input building and check while a slower rank is still in its last timed operations; with
// more ranks than cores that work takes the straggler's core and its time grows with work that is
// not the collective's (4 ranks on 2 cores: shared-memory allgather 64 KiB-2 MiB 1.5-2.5x slower
// in 20-iteration sweeps once the check moved to the front of each size). So every
// implementation waits in a barrier, untimed, before leaving a size's timed loop.
//
// The next size of a sweep after `bytes` (Note [Sweep budget]).
int64_t NextSweepBytes(int64_t bytes, int64_t coarse_from);

// IterationsFor, then capped by `budget_bytes` (Note [Sweep budget]); `warmup` selects the floor.
int BudgetedIterations(int iters, int64_t bytes, int64_t budget_bytes, bool warmup);

// Writes elements [begin, begin + count) of `rank`'s input into `dst`.
void FillInput(DType dtype, uint64_t seed, int rank, int64_t begin, int64_t count, void* dst);

// Compares `out`, the result of `op` on `rank` of `world_size` with `count` as above (the root of
// a broadcast is rank 0), with what it must hold; returns the number of wrong elements.
int64_t CountWrong(BenchOp op, DType dtype, uint64_t seed, int rank, int world_size, int64_t count,
                   const void* out);

// OSU-style figures of one size's timed operations (microseconds each).
struct LatencyStats {
  double min_us = 0;
  double p50_us = 0;
  double p99_us = 0;  // nearest rank: with 20 operations, the slowest but none
  double max_us = 0;
};

// The figures of `sorted_us` (ascending; empty gives zeros).
LatencyStats Latencies(const std::vector<double>& sorted_us);

// Prints and flushes the result line every implementation prints, per size and rank:
//   "ROW rank=R bytes=B count=C time_us=T p50_us=P max_us=M min_us=N p99_us=Q wrong=W"
// (T the mean per operation; bench/collectives/report.h reads it).
void PrintRowLine(int rank, int64_t bytes, int64_t count, double mean_us,
                  const LatencyStats& latency, int64_t wrong);

}  // namespace bench
}  // namespace paddle

#endif  // BENCH_COLLECTIVES_BENCH_INPUTS_H_
