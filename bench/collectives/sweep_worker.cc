// The benchmark's worker: one rank of our own backend running the size sweep.
#include "bench/collectives/sweep_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace bench {
namespace {

// The tensors of one size: `input` is filled, `output` receives the result (the same tensor for
// in-place operations).
struct Buffers {
  Tensor input;
  Tensor output;
};

absl::StatusOr<Buffers> MakeBuffers(const SweepConfig& config, int64_t count) {
  const bool in_place = config.op == BenchOp::kAllreduce || config.op == BenchOp::kBroadcast;
  const int64_t block = count / config.nproc;  // allgather, reduce_scatter
  Buffers b;
  ASSIGN_OR_RETURN(b.input,
                   Tensor::Empty({config.op == BenchOp::kAllgather ? block : count}, config.dtype));
  if (in_place) {
    b.output = b.input;
  } else {
    ASSIGN_OR_RETURN(b.output, Tensor::Empty({config.op == BenchOp::kReduceScatter ? block : count},
                                             config.dtype));
  }
  return b;
}

absl::Status RunOnce(const SweepConfig& config, Communicator& comm, const Buffers& b) {
  switch (config.op) {
    case BenchOp::kAllreduce:
      return comm.Allreduce(b.input, ReduceOp::kSum)->Wait();
    case BenchOp::kBroadcast:
      return comm.Broadcast(b.input, /*root=*/0)->Wait();
    case BenchOp::kAllgather:
      return comm.Allgather(b.input, b.output)->Wait();
    case BenchOp::kReduceScatter:
      return comm.ReduceScatter(b.input, b.output, ReduceOp::kSum)->Wait();
    case BenchOp::kAlltoall:
      return comm.Alltoall(b.input, b.output)->Wait();
  }
  return absl::InvalidArgumentError("unknown op");
}

absl::Status RunSize(const SweepConfig& config, int rank, Communicator& comm, int64_t count) {
  ASSIGN_OR_RETURN(Buffers b, MakeBuffers(config, count));
  FillInput(config.dtype, config.seed, rank, 0, b.input.numel(), b.input.data());
  const int64_t bytes = count * static_cast<int64_t>(DTypeSize(config.dtype));
  const int iters = BudgetedIterations(config.iters, bytes, config.budget_bytes, false);
  const int warmup = BudgetedIterations(config.warmup, bytes, config.budget_bytes, true);
  // Note [Checked first run] in bench_inputs.h: the first operation is checked and is a warm-up.
  RETURN_IF_ERROR(RunOnce(config, comm, b));
  const int64_t wrong =
      CountWrong(config.op, config.dtype, config.seed, rank, config.nproc, count, b.output.data());
  for (int i = 1; i < warmup; ++i) RETURN_IF_ERROR(RunOnce(config, comm, b));
  RETURN_IF_ERROR(comm.Barrier()->Wait());
  // Each iteration is timed too: the mean (what nccl-tests reports) hides whether every
  // operation is a little slow or one in many stalls; the median and the maximum tell them apart.
  std::vector<double> iteration_us(std::max(iters, 0));
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (int i = 0; i < iters; ++i) {
    RETURN_IF_ERROR(RunOnce(config, comm, b));
    const auto now = std::chrono::steady_clock::now();
    iteration_us[i] = std::chrono::duration<double, std::micro>(now - last).count();
    last = now;
  }
  const double seconds = std::chrono::duration<double>(last - start).count();
  // Note [Barrier after the timed loop] in bench_inputs.h.
  RETURN_IF_ERROR(comm.Barrier()->Wait());
  std::sort(iteration_us.begin(), iteration_us.end());
  const LatencyStats latency = Latencies(iteration_us);
  PrintRowLine(rank, bytes, count, seconds * 1e6 / std::max(iters, 1), latency, wrong);
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> SweepCounts(const SweepConfig& config) {
  std::vector<int64_t> counts;
  const int64_t size = static_cast<int64_t>(DTypeSize(config.dtype));
  const bool split = SplitsByRank(config.op);
  for (int64_t bytes = config.min_bytes; bytes <= config.max_bytes;
       bytes = NextSweepBytes(bytes, config.coarse_from)) {
    int64_t count = bytes / size;
    if (split) count -= count % config.nproc;
    if (count > 0 && (counts.empty() || counts.back() != count)) counts.push_back(count);
    if (bytes <= 0) break;
  }
  return counts;
}

int RunSweepWorker(const SweepConfig& config, int rank, int store_port) {
  SetLogRank(rank, config.nproc);
  auto fail = [](const absl::Status& status) {
    std::printf("ERROR %s\n", status.ToString().c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  };
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = store_port;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
  if (!store.ok()) return fail(store.status());
  CommunicatorOptions options;
  options.store = std::shared_ptr<Store>(*std::move(store));
  options.store_prefix = "bench";
  options.rank = rank;
  options.world_size = config.nproc;
  options.timeout = config.op_timeout;
  options.algorithm = config.algo;
  absl::StatusOr<Backend> backend = ParseBackend(config.backend);
  if (!backend.ok()) return fail(backend.status());
  options.backend = *backend;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (!comm.ok()) return fail(comm.status());
  for (int64_t count : SweepCounts(config)) {
    absl::Status status = RunSize(config, rank, **comm, count);
    if (!status.ok()) return fail(status);
  }
  comm->reset();  // meets the other ranks before closing
  return 0;
}

}  // namespace bench
}  // namespace paddle
