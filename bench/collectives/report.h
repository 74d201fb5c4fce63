// Result rows of the collectives benchmark: parsed from the ranks' output, printed as nccl-tests
// prints them, written as JSON, and compared between implementations.
//
// Every implementation (our workers, the PyTorch peer, the MPI peer) prints one line per size and
// rank, "ROW rank=R bytes=B count=C time_us=T p50_us=P max_us=M min_us=N p99_us=Q wrong=W"
// (PrintRowLine in bench_inputs.h), T being that rank's mean time per operation, P its median, Q
// its 99th percentile, N and M its fastest and slowest single operation (OSU's latency columns).
// A table row takes the slowest rank's times (an operation is done when its last rank is) and the
// sum of the ranks' wrong elements. The mean gives the bandwidth columns, as in nccl-tests; the
// percentiles show whether a slow mean is every operation or a few stalls.
//   algbw = bytes / time (GB/s, 1e9 bytes)
//   busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter and alltoall, 1
//   for
//           broadcast: the bandwidth each rank's link must sustain, comparable across n
//           (nccl-tests' PERFORMANCE.md).
#ifndef BENCH_COLLECTIVES_REPORT_H_
#define BENCH_COLLECTIVES_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/collectives/bench_inputs.h"

namespace paddle {
namespace bench {

struct Row {
  std::string op;         // "allreduce"
  std::string backend;    // "gloo", "native", "torch", "openmpi"
  std::string algo;       // "ring", "auto", "default"
  std::string transport;  // "tcp", "shm", "default"
  int nproc = 0;
  int64_t bytes = 0;
  int64_t count = 0;
  std::string dtype;   // "float32"
  double time_us = 0;  // mean
  double p50_us = 0;   // median operation
  double max_us = 0;   // slowest operation
  double min_us = 0;   // fastest operation
  double p99_us = 0;   // 99th percentile operation
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  int64_t wrong = 0;
};

double BusBandwidthFactor(BenchOp op, int nproc);

// Rows from the ROW lines in `outputs` (the stdout of one or more processes); every size must
// have a line from each of `like.nproc` ranks. Fields not in the lines are copied from `like`.
absl::StatusOr<std::vector<Row>> CollectRows(const std::vector<std::string>& outputs, BenchOp op,
                                             const Row& like);

// Several rounds of one implementation's sweep as one: per size that every round has, the median
// of the rounds' mean times (the bandwidth columns follow from it), the median of their medians,
// the median of their 99th percentiles, the fastest and the slowest operation of all rounds and
// the wrong elements of all. Rounds that produced no
// rows are left out; none left gives an empty result.
std::vector<Row> MedianOfRounds(const std::vector<std::vector<Row>>& rounds, BenchOp op);

// "# <title>" and the nccl-tests columns.
void PrintTable(std::FILE* out, const std::string& title, const std::vector<Row>& rows);

// Our busbw over each peer's, per size (sizes missing from a peer print "-").
void PrintRatios(std::FILE* out, const std::vector<Row>& ours,
                 const std::vector<std::vector<Row>>& peers);

// A JSON array, one object per row.
absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows);

}  // namespace bench
}  // namespace paddle

#endif  // BENCH_COLLECTIVES_REPORT_H_
