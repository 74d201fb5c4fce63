// One rank of the collectives benchmark on our own backends (native or gloo).
//
// The benchmark's parent process hosts a TcpStoreServer and starts N copies of itself with
// --worker; each connects to the store, creates its Communicator and runs the size sweep:
//   1. fill the input from (seed, rank, index) (bench_inputs.h);
//   2. `warmup` operations, then a barrier so all ranks start the timed loop together;
//   3. `iters` operations, each waited for before the next (as PyTorch's and MPI's blocking
//      calls are, so the three are measured alike); time = the mean per operation;
//   4. fill the input again, run once more and check every element of the output;
//   5. print "ROW rank=R bytes=B count=C time_us=T ..." with the median, p99, fastest and slowest
//      single operation (PrintRowLine in bench_inputs.h; report.h reads it).
#ifndef BENCH_COLLECTIVES_SWEEP_WORKER_H_
#define BENCH_COLLECTIVES_SWEEP_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/collectives/bench_inputs.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace bench {

struct SweepConfig {
  std::string backend = "gloo";  // "native" | "gloo"
  std::string algo;              // CommunicatorOptions.algorithm; "" = the backend's choice
  BenchOp op = BenchOp::kAllreduce;
  DType dtype = DType::kFloat32;
  int nproc = 2;
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 256 << 20;
  int iters = 20;
  int warmup = 5;
  int64_t coarse_from = 0;   // sizes step 4x from here (0: never); Note [Sweep budget]
  int64_t budget_bytes = 0;  // fewer iterations above this size (0: never); the same note
  uint64_t seed = 1;
  absl::Duration op_timeout = absl::Seconds(300);  // each collective
};

// The element counts of the sweep: `bytes` from min_bytes to max_bytes by powers of two (by 4x
// from coarse_from, Note [Sweep budget] in bench_inputs.h), as
// elements of `dtype`; allgather, reduce_scatter and alltoall round down to a multiple of nproc.
// Sizes that come to no element are skipped.
std::vector<int64_t> SweepCounts(const SweepConfig& config);

// Runs the sweep as `rank`, rendezvousing through the TcpStoreServer at 127.0.0.1:`store_port`.
// Returns the process exit code (0, or 1 after printing "ERROR <status>").
int RunSweepWorker(const SweepConfig& config, int rank, int store_port);

}  // namespace bench
}  // namespace paddle

#endif  // BENCH_COLLECTIVES_SWEEP_WORKER_H_
