// bench/collectives: nccl-tests-style bandwidth sweep of our collectives, against peers.
//
//   bazel run -c opt //bench:collectives -- --backend=native|gloo --op=allreduce --nproc=4
//       --min-bytes=4K --max-bytes=256M --dtype=fp32 [--peers] [--json=FILE] [--iters=20]
//       [--warmup=5] [--algo=ring] [--seed=1] [--timeout-s=1800] [--rounds=1]
//       [--coarse-from=1M] [--budget-bytes=4M]
//
// The benchmark starts --nproc workers itself (this binary re-executed with --worker), which
// rendezvous through a TcpStoreServer it hosts on loopback, sweep the sizes by powers of two and
// check every element of every result (sweep_worker.h). It prints the nccl-tests columns: size,
// count, type, time (us), algbw and busbw (GB/s, report.h), #wrong, and the median and slowest
// single operation. --iters and --warmup count the runs of each size from 64 KiB up; smaller
// sizes run up to 16x more (IterationsFor in bench_inputs.h), so a single stall does not decide a
// microsecond-scale mean. --coarse-from steps sizes by 4x from that size and --budget-bytes runs
// fewer iterations above it (Note [Sweep budget] in bench_inputs.h); both are passed to the peers.
//
// --peers runs the same sweep, the same sizes, iterations and blocking calls, through PyTorch's
// gloo backend (bench/peers/torch_collectives.py, N python3 processes, env://; it has no
// reduce_scatter, so that op has no PyTorch column) and OpenMPI (bench/peers/mpi_collectives.cc
// under mpirun.openmpi), once over TCP (pml ob1, btl tcp,self) and once with OpenMPI's defaults
// (shared memory on one host), then prints our busbw over each peer's per size. The load average is
// printed with every table: this is a shared machine, and the figures mean little without it.
//
// --rounds=R runs every implementation's sweep R times, taking turns (ours, PyTorch, OpenMPI over
// TCP, OpenMPI's default, then ours again...), and compares per size the median of the rounds'
// mean times (MedianOfRounds in report.h). On shared machines one implementation's figures drift
// between runs minutes apart by more than most of the differences measured
// (docs/performance-notes.md); interleaved rounds put both sides of a ratio in the same weather.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/collectives/bench_inputs.h"
#include "bench/collectives/processes.h"
#include "bench/collectives/report.h"
#include "bench/collectives/sweep_worker.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace bench {
namespace {

struct Flags {
  SweepConfig sweep;
  bool peers = false;
  int rounds = 1;
  std::string json;
  absl::Duration run_limit = absl::Seconds(1800);  // each implementation's whole sweep
  // Set in worker processes only.
  bool worker = false;
  int rank = -1;
  int store_port = 0;
};

constexpr char kUsage[] =
    "usage: collectives --backend=native|gloo "
    "--op=allreduce|allgather|reduce_scatter|broadcast|alltoall "
    "--nproc=N --min-bytes=4K --max-bytes=256M --dtype=fp32 [--peers] [--json=FILE] "
    "[--iters=20] [--warmup=5] [--algo=NAME] [--seed=1] [--timeout-s=1800] [--rounds=1] "
    "[--coarse-from=1M] [--budget-bytes=4M]\n";

// --help: the usage line, then each flag (the file's header comment has the details).
constexpr char kHelp[] =
    "nccl-tests-style bandwidth sweep of our collectives, checked element by element.\n"
    "  --backend=native|gloo   our backend (default gloo)\n"
    "  --op=OP                 allreduce (default), allgather, reduce_scatter, broadcast or "
    "alltoall\n"
    "  --nproc=N               worker processes, 1..15 (default 2)\n"
    "  --min-bytes=4K --max-bytes=256M   sizes swept by powers of two (K, M, G suffixes)\n"
    "  --dtype=fp32            element type (not bool or int8)\n"
    "  --iters=20 --warmup=5   timed and untimed runs per size from 64 KiB (more below)\n"
    "  --algo=NAME             the algorithm (default: the backend's choice)\n"
    "  --seed=1                seed of the checked inputs\n"
    "  --timeout-s=1800        seconds each implementation's whole sweep may take\n"
    "  --coarse-from=0         step sizes by 4x from this size (0: never)\n"
    "  --budget-bytes=0        fewer iterations above this size (0: never)\n"
    "  --peers                 also PyTorch's gloo and OpenMPI, with ratios per size\n"
    "  --rounds=R              R interleaved rounds of every implementation, medians (1..50)\n"
    "  --json=FILE             every row as JSON\n"
    "exit status: 0 when every result was right, 1 on a wrong element or a failed sweep, 2 for "
    "a bad command line.\n";

enum class Parsed { kRun, kHelp, kBad };

// "4K", "256M", "1G", "4096".
bool ParseBytes(absl::string_view text, int64_t* bytes) {
  int64_t scale = 1;
  if (absl::ConsumeSuffix(&text, "K") || absl::ConsumeSuffix(&text, "k")) {
    scale = int64_t{1} << 10;
  } else if (absl::ConsumeSuffix(&text, "M") || absl::ConsumeSuffix(&text, "m")) {
    scale = int64_t{1} << 20;
  } else if (absl::ConsumeSuffix(&text, "G") || absl::ConsumeSuffix(&text, "g")) {
    scale = int64_t{1} << 30;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) return false;
  *bytes = value * scale;
  return true;
}

Parsed ParseFlags(int argc, char** argv, Flags* flags) {
  SweepConfig& s = flags->sweep;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return Parsed::kHelp;
    absl::string_view value;
    const size_t eq = arg.find('=');
    const absl::string_view key = arg.substr(0, eq);
    if (eq != absl::string_view::npos) value = arg.substr(eq + 1);
    bool ok = true;
    const char* expected = "";  // what a good value is, for the error
    double seconds = 0;
    if (key == "--backend") {
      s.backend = std::string(value);
      ok = value == "native" || value == "gloo";
      expected = "native or gloo";
    } else if (key == "--op") {
      ok = ParseBenchOp(value, &s.op);
      expected = "allreduce, allgather, reduce_scatter, broadcast or alltoall";
    } else if (key == "--nproc") {
      ok = absl::SimpleAtoi(value, &s.nproc) && s.nproc >= 1 && s.nproc <= 15;
      expected = "1..15 (the checked sums must stay exact)";
    } else if (key == "--min-bytes" || key == "--max-bytes") {
      ok = ParseBytes(value, key == "--min-bytes" ? &s.min_bytes : &s.max_bytes);
      expected = "a byte count above 0, e.g. 4096, 4K, 256M, 1G";
    } else if (key == "--coarse-from" || key == "--budget-bytes") {
      ok = value == "0" ||
           ParseBytes(value, key == "--coarse-from" ? &s.coarse_from : &s.budget_bytes);
      expected = "0 or a byte count, e.g. 1M";
    } else if (key == "--dtype") {
      absl::StatusOr<DType> dtype = ParseDType(value);
      ok = dtype.ok() && *dtype != DType::kBool && *dtype != DType::kInt8;
      if (ok) s.dtype = *dtype;
      expected = "a numeric dtype other than int8, e.g. fp32, bf16, int32";
    } else if (key == "--iters") {
      ok = absl::SimpleAtoi(value, &s.iters) && s.iters >= 1;
      expected = "at least 1";
    } else if (key == "--warmup") {
      ok = absl::SimpleAtoi(value, &s.warmup) && s.warmup >= 0;
      expected = "at least 0";
    } else if (key == "--algo") {
      s.algo = std::string(value);
    } else if (key == "--seed") {
      ok = absl::SimpleAtoi(value, &s.seed);
      expected = "an integer";
    } else if (key == "--timeout-s") {
      ok = absl::SimpleAtod(value, &seconds) && seconds > 0;
      flags->run_limit = absl::Seconds(seconds);
      s.op_timeout = std::min(s.op_timeout, flags->run_limit);
      expected = "seconds above 0";
    } else if (key == "--peers") {
      flags->peers = true;
    } else if (key == "--rounds") {
      ok = absl::SimpleAtoi(value, &flags->rounds) && flags->rounds >= 1 && flags->rounds <= 50;
      expected = "1..50";
    } else if (key == "--json") {
      flags->json = std::string(value);
    } else if (key == "--worker") {
      flags->worker = true;
    } else if (key == "--rank") {
      ok = absl::SimpleAtoi(value, &flags->rank);
      expected = "an integer";
    } else if (key == "--store-port") {
      ok = absl::SimpleAtoi(value, &flags->store_port);
      expected = "a port";
    } else {
      std::fprintf(stderr, "collectives: unknown flag \"%s\" (--help lists the flags)\n%s", argv[i],
                   kUsage);
      return Parsed::kBad;
    }
    if (!ok) {
      std::fprintf(stderr, "collectives: bad value in \"%s\": %.*s takes %s\n%s", argv[i],
                   static_cast<int>(key.size()), key.data(), expected, kUsage);
      return Parsed::kBad;
    }
  }
  if (s.min_bytes > s.max_bytes) {
    std::fprintf(stderr, "collectives: --min-bytes is larger than --max-bytes\n%s", kUsage);
    return Parsed::kBad;
  }
  return Parsed::kRun;
}

std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "?";
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f %.2f %.2f", load[0], load[1], load[2]);
  return text;
}

std::string Title(const Row& like, const SweepConfig& s, const std::string& load_before) {
  return absl::StrCat(like.op, ", ", like.backend, " (algo ", like.algo, ", transport ",
                      like.transport, "), nproc ", like.nproc, ", ", like.dtype, ", iters ",
                      s.iters, ", warmup ", s.warmup, "; load average ", load_before, " before, ",
                      LoadAverage(), " after");
}

// A file of the benchmark's runfiles (bench/mpi_collectives, bench/peers/torch_collectives.py).
std::string Runfile(const std::string& path) {
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(dir, "/paddle/", path));
  }
  candidates.push_back(absl::StrCat(SelfPath(), ".runfiles/paddle/", path));
  candidates.push_back(path);
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return path;
}

// The sweep flags every implementation understands.
std::vector<std::string> SweepArgs(const SweepConfig& s) {
  return {absl::StrCat("--nproc=", s.nproc),
          absl::StrCat("--min-bytes=", s.min_bytes),
          absl::StrCat("--max-bytes=", s.max_bytes),
          absl::StrCat("--iters=", s.iters),
          absl::StrCat("--warmup=", s.warmup),
          absl::StrCat("--seed=", s.seed),
          absl::StrCat("--dtype=", DTypeName(s.dtype)),
          absl::StrCat("--coarse-from=", s.coarse_from),
          absl::StrCat("--budget-bytes=", s.budget_bytes)};
}

// Runs `specs`, then turns their output into rows; an empty result (after a message) on failure.
std::vector<Row> RunAndCollect(const std::vector<ProcessSpec>& specs, BenchOp op, const Row& like,
                               const Flags& flags) {
  const std::string load = LoadAverage();
  std::fprintf(stderr, "running %s/%s/%s with %d processes (load average %s)...\n",
               like.backend.c_str(), like.algo.c_str(), like.transport.c_str(), like.nproc,
               load.c_str());
  std::vector<ProcessOutcome> outcomes = RunProcesses(specs, flags.run_limit);
  std::vector<std::string> outputs;
  bool failed = false;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    outputs.push_back(outcomes[i].output);
    if (outcomes[i].exit_code != 0) {
      failed = true;
      std::fprintf(stderr, "%s process %zu exited with %d%s; its output:\n%s\n",
                   like.backend.c_str(), i, outcomes[i].exit_code,
                   outcomes[i].exit_code == -1 ? " (killed at --timeout-s)" : "",
                   outcomes[i].output.c_str());
    }
  }
  absl::StatusOr<std::vector<Row>> rows = CollectRows(outputs, op, like);
  if (!rows.ok() || failed) {
    std::fprintf(stderr, "%s: no usable results: %s\n", like.backend.c_str(),
                 rows.ok() ? "a process failed" : rows.status().ToString().c_str());
    return {};
  }
  PrintTable(stdout, Title(like, flags.sweep, load), *rows);
  return *std::move(rows);
}

std::vector<Row> RunOurs(const Flags& flags) {
  const SweepConfig& s = flags.sweep;
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "cannot host the store: %s\n", server.status().ToString().c_str());
    return {};
  }
  std::vector<ProcessSpec> specs(s.nproc);
  for (int r = 0; r < s.nproc; ++r) {
    specs[r].argv = {SelfPath(),
                     absl::StrCat("--backend=", s.backend),
                     absl::StrCat("--op=", BenchOpName(s.op)),
                     absl::StrCat("--algo=", s.algo),
                     absl::StrCat("--timeout-s=", absl::ToDoubleSeconds(flags.run_limit)),
                     "--worker",
                     absl::StrCat("--rank=", r),
                     absl::StrCat("--store-port=", (*server)->port())};
    for (std::string& arg : SweepArgs(s)) specs[r].argv.push_back(arg);
    // All ranks run on this host: loopback, unless the user chose an interface.
    if (!StringSetting("PADDLE_SOCKET_IFNAME").has_value()) {
      specs[r].env.push_back({"PADDLE_SOCKET_IFNAME", "127.0.0.1"});
    }
  }
  Row like;
  like.op = std::string(BenchOpName(s.op));
  like.backend = s.backend;
  like.algo = !s.algo.empty() ? s.algo : s.backend == "gloo" ? "ring" : "auto";
  // Native: PADDLE_TRANSPORT as the workers see it ("auto": the node workspace on one host).
  // A malformed value fails the workers, which name it; the row then says "auto".
  absl::StatusOr<std::optional<std::string>> transport = ChoiceSetting("PADDLE_TRANSPORT");
  like.transport = s.backend == "gloo" ? "tcp"
                   : transport.ok()    ? transport->value_or("auto")
                                       : "auto";
  like.nproc = s.nproc;
  like.dtype = std::string(DTypeName(s.dtype));
  return RunAndCollect(specs, s.op, like, flags);
}

std::vector<Row> RunTorch(const Flags& flags) {
  const SweepConfig& s = flags.sweep;
  if (s.op == BenchOp::kReduceScatter) {
    std::fprintf(stderr, "torch: PyTorch 1.13's gloo backend has no reduce_scatter; no column\n");
    return {};
  }
  const int port = FreeLoopbackPort();
  std::vector<ProcessSpec> specs(s.nproc);
  for (int r = 0; r < s.nproc; ++r) {
    specs[r].argv = {"/usr/bin/python3", Runfile("bench/peers/torch_collectives.py"),
                     absl::StrCat("--op=", BenchOpName(s.op))};
    for (std::string& arg : SweepArgs(s)) specs[r].argv.push_back(arg);
    specs[r].env = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", absl::StrCat(port)},
                    {"RANK", absl::StrCat(r)},    {"WORLD_SIZE", absl::StrCat(s.nproc)},
                    {"GLOO_SOCKET_IFNAME", "lo"}, {"OMP_NUM_THREADS", "1"}};
  }
  Row like;
  like.op = std::string(BenchOpName(s.op));
  like.backend = "torch";
  like.algo = "gloo-default";
  like.transport = "tcp";
  like.nproc = s.nproc;
  like.dtype = std::string(DTypeName(s.dtype));
  return RunAndCollect(specs, s.op, like, flags);
}

std::vector<Row> RunMpi(const Flags& flags, bool tcp) {
  const SweepConfig& s = flags.sweep;
  ProcessSpec spec;
  // mpirun.openmpi, not mpirun: with MPICH installed too, `mpirun` is whichever the
  // alternatives system ranks first, and MPICH's does not know OpenMPI's flags.
  spec.argv = {
      "mpirun.openmpi",     "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
      absl::StrCat(s.nproc)};
  if (tcp) {
    for (const char* arg :
         {"--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"}) {
      spec.argv.push_back(arg);
    }
  }
  spec.argv.push_back(Runfile("bench/mpi_collectives"));
  spec.argv.push_back(absl::StrCat("--op=", BenchOpName(s.op)));
  for (std::string& arg : SweepArgs(s)) spec.argv.push_back(arg);
  Row like;
  like.op = std::string(BenchOpName(s.op));
  like.backend = "openmpi";
  like.algo = "default";
  like.transport = tcp ? "tcp" : "default-shm";
  like.nproc = s.nproc;
  like.dtype = std::string(DTypeName(s.dtype));
  return RunAndCollect({spec}, s.op, like, flags);
}

int Main(int argc, char** argv) {
  Flags flags;
  switch (ParseFlags(argc, argv, &flags)) {
    case Parsed::kHelp:
      std::printf("%s%s", kUsage, kHelp);
      return 0;
    case Parsed::kBad:
      return 2;
    case Parsed::kRun:
      break;
  }
  if (flags.worker) return RunSweepWorker(flags.sweep, flags.rank, flags.store_port);

  // Round r of every implementation runs before round r + 1 of any (see --rounds above).
  std::vector<std::vector<Row>> our_rounds;
  std::vector<std::vector<std::vector<Row>>> peer_rounds(flags.peers ? 3 : 0);
  for (int round = 0; round < flags.rounds; ++round) {
    if (flags.rounds > 1) std::fprintf(stderr, "round %d of %d\n", round + 1, flags.rounds);
    our_rounds.push_back(RunOurs(flags));
    if (flags.peers) {
      peer_rounds[0].push_back(RunTorch(flags));
      peer_rounds[1].push_back(RunMpi(flags, /*tcp=*/true));
      peer_rounds[2].push_back(RunMpi(flags, /*tcp=*/false));
    }
  }
  const BenchOp op = flags.sweep.op;
  std::vector<Row> ours = flags.rounds > 1 ? MedianOfRounds(our_rounds, op) : our_rounds[0];
  if (flags.rounds > 1 && !ours.empty()) {
    PrintTable(stdout, absl::StrCat("ours, median of ", flags.rounds, " rounds"), ours);
  }
  std::vector<Row> all = ours;
  if (flags.peers) {
    std::vector<std::vector<Row>> peers;
    for (const std::vector<std::vector<Row>>& rounds : peer_rounds) {
      peers.push_back(flags.rounds > 1 ? MedianOfRounds(rounds, op) : rounds[0]);
      all.insert(all.end(), peers.back().begin(), peers.back().end());
    }
    if (flags.rounds > 1) std::printf("# medians of %d interleaved rounds\n", flags.rounds);
    PrintRatios(stdout, ours, peers);
  }
  if (!flags.json.empty()) {
    absl::Status written = WriteJson(flags.json, all);
    if (!written.ok()) std::fprintf(stderr, "%s\n", written.ToString().c_str());
  }
  int64_t wrong = 0;
  for (const Row& row : all) wrong += row.wrong;
  if (ours.empty()) return 1;
  if (wrong > 0) {
    std::fprintf(stderr, "%lld wrong elements in all\n", static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace paddle

int main(int argc, char** argv) { return paddle::bench::Main(argc, argv); }
