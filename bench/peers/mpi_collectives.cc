// The MPI peer of bench/collectives: MPI_Allreduce (in place, MPI_SUM), MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Bcast (root 0) or MPI_Alltoall over the same sizes, inputs,
// iterations and checks as our own workers (bench/collectives/sweep_worker.h), so the figures
// compare like with like. Built twice: :mpi_collectives against OpenMPI (started by the benchmark
// under mpirun.openmpi) and :mpich_collectives against MPICH (started by tools/bench-report under
// mpiexec.mpich); every rank prints its "ROW ..." lines (bench/collectives/report.h).
//
//   mpirun.openmpi -np N bench/mpi_collectives --op=allreduce --min-bytes=4096
//       --max-bytes=268435456 --iters=20 --warmup=5 --seed=1 --dtype=float32
//       [--coarse-from=1048576 --budget-bytes=4194304]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "bench/collectives/bench_inputs.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace bench {
namespace {

struct Args {
  int64_t min_bytes = 4096;
  int64_t max_bytes = 4096;
  int iters = 20;
  int warmup = 5;
  int64_t coarse_from = 0;  // Note [Sweep budget] in bench_inputs.h
  int64_t budget_bytes = 0;
  uint64_t seed = 1;
  DType dtype = DType::kFloat32;
  BenchOp op = BenchOp::kAllreduce;
};

bool Parse(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == absl::string_view::npos) return false;
    const absl::string_view key = arg.substr(0, eq), value = arg.substr(eq + 1);
    bool ok = true;
    if (key == "--min-bytes") {
      ok = absl::SimpleAtoi(value, &args->min_bytes);
    } else if (key == "--max-bytes") {
      ok = absl::SimpleAtoi(value, &args->max_bytes);
    } else if (key == "--iters") {
      ok = absl::SimpleAtoi(value, &args->iters);
    } else if (key == "--warmup") {
      ok = absl::SimpleAtoi(value, &args->warmup);
    } else if (key == "--coarse-from") {
      ok = absl::SimpleAtoi(value, &args->coarse_from) && args->coarse_from >= 0;
    } else if (key == "--budget-bytes") {
      ok = absl::SimpleAtoi(value, &args->budget_bytes) && args->budget_bytes >= 0;
    } else if (key == "--seed") {
      ok = absl::SimpleAtoi(value, &args->seed);
    } else if (key == "--op") {
      ok = ParseBenchOp(value, &args->op);
    } else if (key == "--dtype") {
      absl::StatusOr<DType> dtype = ParseDType(value);
      ok = dtype.ok();
      if (ok) args->dtype = *dtype;
    } else if (key != "--nproc") {
      ok = false;
    }
    if (!ok) return false;
  }
  return args->min_bytes > 0 && args->min_bytes <= args->max_bytes && args->iters > 0;
}

// MPI has no float16/bfloat16 sum.
MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

// The counts of one size as sweep_worker.cc's SweepCounts makes them: split operations round
// down to a multiple of the world size.
int64_t CountFor(const Args& args, int64_t bytes, int size) {
  int64_t count = bytes / static_cast<int64_t>(DTypeSize(args.dtype));
  if (SplitsByRank(args.op)) count -= count % size;
  return count;
}

// One blocking operation; `in` and `out` hold what MakeBuffers in sweep_worker.cc allocates (in
// place for allreduce and broadcast). MPI counts are int: sizes past 2^31 elements would need
// MPI 4's large-count calls.
void RunOnce(const Args& args, MPI_Datatype type, int size, int64_t count, char* in, char* out) {
  const int n = static_cast<int>(count);
  const int block = static_cast<int>(count / size);
  switch (args.op) {
    case BenchOp::kAllreduce:
      MPI_Allreduce(MPI_IN_PLACE, in, n, type, MPI_SUM, MPI_COMM_WORLD);
      return;
    case BenchOp::kBroadcast:
      MPI_Bcast(in, n, type, 0, MPI_COMM_WORLD);
      return;
    case BenchOp::kAllgather:
      MPI_Allgather(in, block, type, out, block, type, MPI_COMM_WORLD);
      return;
    case BenchOp::kReduceScatter:
      MPI_Reduce_scatter_block(in, out, block, type, MPI_SUM, MPI_COMM_WORLD);
      return;
    case BenchOp::kAlltoall:
      MPI_Alltoall(in, block, type, out, block, type, MPI_COMM_WORLD);
      return;
  }
}

int Run(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args args;
  if (!Parse(argc, argv, &args) || MpiType(args.dtype) == MPI_DATATYPE_NULL) {
    if (rank == 0) std::fprintf(stderr, "mpi_collectives: bad arguments or unsupported dtype\n");
    MPI_Finalize();
    return 2;
  }
  const MPI_Datatype type = MpiType(args.dtype);
  const int64_t element = static_cast<int64_t>(DTypeSize(args.dtype));
  const bool in_place = args.op == BenchOp::kAllreduce || args.op == BenchOp::kBroadcast;
  int64_t previous = 0;
  for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes;
       bytes = NextSweepBytes(bytes, args.coarse_from)) {
    const int64_t count = CountFor(args, bytes, size);
    if (count == 0 || count == previous) continue;
    previous = count;
    const int64_t block = count / size;
    const int64_t in_count = args.op == BenchOp::kAllgather ? block : count;
    const int64_t out_count = args.op == BenchOp::kReduceScatter ? block : count;
    std::unique_ptr<char[]> in(new char[in_count * element]);
    std::unique_ptr<char[]> out(in_place ? nullptr : new char[out_count * element]);
    char* result = in_place ? in.get() : out.get();
    FillInput(args.dtype, args.seed, rank, 0, in_count, in.get());
    const int iters = BudgetedIterations(args.iters, count * element, args.budget_bytes, false);
    const int warmup = BudgetedIterations(args.warmup, count * element, args.budget_bytes, true);
    // Note [Checked first run] in bench_inputs.h: checked, and the first warm-up.
    RunOnce(args, type, size, count, in.get(), result);
    const int64_t wrong = CountWrong(args.op, args.dtype, args.seed, rank, size, count, result);
    for (int i = 1; i < warmup; ++i) RunOnce(args, type, size, count, in.get(), result);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> iteration_us(iters);
    const double start = MPI_Wtime();
    double last = start;
    for (int i = 0; i < iters; ++i) {
      RunOnce(args, type, size, count, in.get(), result);
      const double now = MPI_Wtime();
      iteration_us[i] = (now - last) * 1e6;
      last = now;
    }
    const double seconds = last - start;
    MPI_Barrier(MPI_COMM_WORLD);  // Note [Barrier after the timed loop] in bench_inputs.h
    std::sort(iteration_us.begin(), iteration_us.end());
    PrintRowLine(rank, count * element, count, seconds * 1e6 / iters, Latencies(iteration_us),
                 wrong);
  }
  // Note [Finalize hang]: MPICH 4.0 over UCX 1.13's TCP transport sometimes never returns from
  // MPI_Finalize (a rank spins in ucp_worker_progress flushing its endpoints while the others
  // wait in the PMI barrier; openucx/ucx#8738), after every size was measured and checked. This
  // line tells tools/bench-report that the rank's results are all out, so it can end such a run
  // after a short grace instead of waiting for its timeout and losing the rows. The barrier
  // first made it rarer in a 20-line repro (2 hangs in 8 runs instead of 6 in 8, 4 ranks).
  MPI_Barrier(MPI_COMM_WORLD);
  std::printf("FINALIZE rank=%d\n", rank);
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace paddle

int main(int argc, char** argv) { return paddle::bench::Run(argc, argv); }
