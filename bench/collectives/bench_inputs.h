// The data of the collectives benchmark: inputs made from (seed, rank, index) and the check of
// every output element, shared by our own workers and the MPI peer so both move and verify the
// very same numbers.
//
// Element i of rank r's input is a small integer from word i of Philox(seed, r): (w % 17) - 8
// (uint8: w % 17). Sums over up to 15 ranks then stay exact in every dtype, float16 and bfloat16
// included (they hold integers up to 256 exactly), so a result is either bit-exact or wrong,
// whatever order an algorithm adds in, and "#wrong" counts real errors, as in nccl-tests.
#ifndef BENCH_COLLECTIVES_BENCH_INPUTS_H_
#define BENCH_COLLECTIVES_BENCH_INPUTS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace bench {

// The collectives the benchmark knows, with nccl-tests' meaning of "count": the elements of the
// tensor an allreduce or broadcast works on, of the gathered output (allgather), or of the
// scattered input (reduce_scatter). The last two need a count divisible by the world size.
enum class BenchOp { kAllreduce, kAllgather, kReduceScatter, kBroadcast };

absl::string_view BenchOpName(BenchOp op);  // "allreduce", ...
bool ParseBenchOp(absl::string_view name, BenchOp* op);

// The iterations (or warm-up iterations) to run for a message of `bytes`, given `iters` for
// large ones: messages under 64 KiB run up to 16x more (4 KiB: 16x), because each takes only
// microseconds and one scheduler stall of a few hundred microseconds among 20 would decide their
// mean. Every implementation (ours and the peers) uses this rule, so they run the same counts.
int IterationsFor(int iters, int64_t bytes);

// Writes elements [begin, begin + count) of `rank`'s input into `dst`.
void FillInput(DType dtype, uint64_t seed, int rank, int64_t begin, int64_t count, void* dst);

// Compares `out`, the result of `op` on `rank` of `world_size` with `count` as above (the root of
// a broadcast is rank 0), with what it must hold; returns the number of wrong elements.
int64_t CountWrong(BenchOp op, DType dtype, uint64_t seed, int rank, int world_size, int64_t count,
                   const void* out);

}  // namespace bench
}  // namespace paddle

#endif  // BENCH_COLLECTIVES_BENCH_INPUTS_H_
