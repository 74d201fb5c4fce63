// The MPI peer of bench/collectives: MPI_Allreduce (in place, MPI_SUM) over the same sizes, inputs,
// iterations and checks as our own workers (bench/collectives/sweep_worker.h), so the figures
// compare like with like. Built twice: :mpi_allreduce against OpenMPI (started by the benchmark
// under mpirun) and :mpich_allreduce against MPICH (started by tools/bench-report under
// mpiexec.mpich); every rank prints its "ROW ..." lines (bench/collectives/report.h).
//
//   mpirun -np N bench/mpi_allreduce --min-bytes=4096 --max-bytes=268435456 --iters=20
//       --warmup=5 --seed=1 --dtype=float32
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
  uint64_t seed = 1;
  DType dtype = DType::kFloat32;
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
    } else if (key == "--seed") {
      ok = absl::SimpleAtoi(value, &args->seed);
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

int Run(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args args;
  if (!Parse(argc, argv, &args) || MpiType(args.dtype) == MPI_DATATYPE_NULL) {
    if (rank == 0) std::fprintf(stderr, "mpi_allreduce: bad arguments or unsupported dtype\n");
    MPI_Finalize();
    return 2;
  }
  const MPI_Datatype type = MpiType(args.dtype);
  const int64_t element = static_cast<int64_t>(DTypeSize(args.dtype));
  for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
    const int64_t count = bytes / element;
    if (count == 0) continue;
    // MPI counts are int: sizes past 2^31 elements would need MPI 4's large-count calls.
    std::unique_ptr<char[]> data(new char[count * element]);
    FillInput(args.dtype, args.seed, rank, 0, count, data.get());
    const int iters = IterationsFor(args.iters, count * element);
    const int warmup = IterationsFor(args.warmup, count * element);
    for (int i = 0; i < warmup; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, data.get(), static_cast<int>(count), type, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> iteration_us(iters);
    const double start = MPI_Wtime();
    double last = start;
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, data.get(), static_cast<int>(count), type, MPI_SUM,
                    MPI_COMM_WORLD);
      const double now = MPI_Wtime();
      iteration_us[i] = (now - last) * 1e6;
      last = now;
    }
    const double seconds = last - start;
    std::sort(iteration_us.begin(), iteration_us.end());
    FillInput(args.dtype, args.seed, rank, 0, count, data.get());
    MPI_Allreduce(MPI_IN_PLACE, data.get(), static_cast<int>(count), type, MPI_SUM, MPI_COMM_WORLD);
    const int64_t wrong =
        CountWrong(BenchOp::kAllreduce, args.dtype, args.seed, rank, size, count, data.get());
    std::printf(
        "ROW rank=%d bytes=%lld count=%lld time_us=%.3f p50_us=%.3f max_us=%.3f wrong=%lld\n", rank,
        static_cast<long long>(count * element), static_cast<long long>(count),
        seconds * 1e6 / iters, iteration_us[iteration_us.size() / 2], iteration_us.back(),
        static_cast<long long>(wrong));
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace paddle

int main(int argc, char** argv) { return paddle::bench::Run(argc, argv); }
