// The table of settings and its readers; see settings.h and Note [Settings table].
#include "paddle/core/settings.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "paddle/core/env.h"

namespace paddle {
namespace {

using T = SettingType;
using R = SettingReader;

constexpr int64_t kMaxMicros = 1000000;  // spins and polls past a second only burn CPU

// Sorted by name (a test checks). Meanings are one line: they end the error messages.
const Setting kSettings[] = {
    {.name = "PADDLE_ALGO",
     .type = T::kChoice,
     .reader = R::kLibrary,
     .default_text = "a size table picks per call",
     .meaning =
         "forces one algorithm for the native backend's allreduce and other flat collectives",
     .see = "docs/algorithms.md",
     .details = "ring, tree (recursive doubling / binomial tree) or hd (halving-doubling) over the "
                "transport; this also turns off the node workspace and the hierarchical allreduce. "
                "Unset, the node workspace or the hierarchical allreduce runs where ranks share "
                "hosts, else a table picks by size, world size and whether rank 0's host has "
                "fewer cores than ranks",
     .choices = "ring,tree,hd"},
    {.name = "PADDLE_BAZEL_FLAGS",
     .type = T::kString,
     .reader = R::kBuild,
     .default_text = "none",
     .meaning = "extra Bazel flags for tools/test, e.g. --config=nocuda"},
    {.name = "PADDLE_BENCH_DIR",
     .type = T::kString,
     .reader = R::kBench,
     .default_text = "$TEST_TMPDIR, else /tmp",
     .meaning = "the folder //bench/checkpoint:checkpoint_bench writes its files to"},
    {.name = "PADDLE_CACHE_DIR",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "$HOME/.cache/paddle",
     .meaning = "where data sets made on first use are kept (Fashion-MNIST shards, CTR data)",
     .see = "paddle/data/dataset_cache.h",
     .details = "a folder per data set and inputs; delete it to make them again"},
    {.name = "PADDLE_CONNECT_TIMEOUT_S",
     .type = T::kSeconds,
     .reader = R::kLibrary,
     .default_text = "60",
     .meaning = "seconds to connect to a store or peer, retries included; 0 or inf for no limit",
     .see = "paddle/core/deadline.h",
     .inf_ok = true},
    {.name = "PADDLE_CPU_BASELINE",
     .type = T::kBool,
     .reader = R::kLibrary,
     .default_text = "0",
     .meaning = "1 forces the baseline x86-64 kernels (no AVX2, F16C or FMA paths)"},
    {.name = "PADDLE_CUDA",
     .type = T::kString,
     .reader = R::kBuild,
     .default_text = "auto: CUDA targets build where the toolkit exists",
     .meaning = "0 builds without CUDA even where the toolkit is installed",
     .see = "docs/building.md",
     .details = "read by third_party/cuda/cuda_configure.bzl, with CUDA_PATH (default "
                "/usr/local/cuda) for where the toolkit is"},
    {.name = "PADDLE_CUDA_DEVICE",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "$LOCAL_RANK, else the rank (modulo the device count)",
     .meaning = "the CUDA device of this rank for the NCCL backend, modulo the device count",
     .min = 0,
     .max = 2147483647},
    {.name = "PADDLE_CUDA_IPC",
     .type = T::kBool,
     .reader = R::kLibrary,
     .default_text = "1",
     .meaning = "1 reduces CUDA tensors of one host through CUDA IPC buffers, 0 stages them "
                "through host memory",
     .see = "paddle/collective/intranode/cuda/ipc_agreement.h",
     .details = "the native backend's path for CUDA tensors of ranks on one host; it is used only "
                "where every rank can"},
    {.name = "PADDLE_CUDA_IPC_BYTES",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "67108864 (64 MiB)",
     .meaning = "bytes of each CUDA IPC scratch buffer; each rank has two",
     .min = int64_t{1} << 20,
     .max = int64_t{4} << 30,
     .multiple_of = 4096},
    {.name = "PADDLE_DEBUG_CHECKS",
     .type = T::kBool,
     .reader = R::kLibrary,
     .default_text = "0",
     .meaning = "1 checks before each collective that all ranks agree on op, shapes and dtypes",
     .see = "docs/python.md",
     .details = "the ranks agree on (op, dtype, count, root, sequence number) before each "
                "collective, over a TCP channel of their own beside any backend (native, gloo, "
                "nccl); a mismatch fails every rank, naming who passed what, and a collective "
                "call returns only once every rank has made it. All ranks must set it alike. The "
                "Python package reads it too, as the default of init_process_group(debug_checks=)"},
    {.name = "PADDLE_ELASTIC",
     .type = T::kBool,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun --min-nproc",
     .meaning = "1 when the worker belongs to an elastic job that regroups when workers die",
     .see = "tools/paddlerun/elastic.py"},
    {.name = "PADDLE_ELASTIC_MAX_SIZE",
     .type = T::kInt,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun --min-nproc: --nproc x the most nodes of --nnodes",
     .meaning = "the most workers an elastic job runs with, over all its nodes",
     .min = 1,
     .max = 1000000},
    {.name = "PADDLE_ELASTIC_MIN_SIZE",
     .type = T::kInt,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun: --min-nproc x the fewest nodes of --nnodes",
     .meaning = "the fewest workers, over all nodes, an elastic job keeps training with",
     .min = 1,
     .max = 1000000},
    {.name = "PADDLE_ERROR_FILE",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "set by paddlerun; unset: none is written",
     .meaning = "where a worker that fails on its own cause writes it, with the time, for the "
                "launcher's verdict",
     .see = "paddle/core/error_file.h",
     .details = "the launcher names the worker whose error file is the earliest, not the first "
                "worker to exit (Note [One verdict] in tools/paddlerun/agent.py)",
     .also_launcher = true},
    {.name = "PADDLE_HOST_ID",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "hostname, boot id and IPC/mount/network namespaces",
     .meaning = "replaces the host identity: ranks with equal values share memory",
     .see = "paddle/collective/transport/shm/host_identity.h"},
    {.name = "PADDLE_JOB_NAME",
     .type = T::kString,
     .reader = R::kWorkers,
     .default_text = "set by tools/k8s",
     .meaning = "the Kubernetes job's name, in every pod tools/k8s generates"},
    {.name = "PADDLE_LOG_LEVEL",
     .type = T::kChoice,
     .reader = R::kLibrary,
     .default_text = "warn",
     .meaning = "the least severe log lines written to stderr",
     .see = "paddle/core/logging.h",
     .choices = "error,warn,warning,info,debug,trace"},
    {.name = "PADDLE_LOG_SUBSYS",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "ALL",
     .meaning = "a comma list of INIT, STORE, NET, COLL, TRAIN, ALL to log, or ^list to exclude",
     .see = "paddle/core/logging.h"},
    {.name = "PADDLE_METRICS_ADDR",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "set by paddlerun; unset: no metrics are sent",
     .meaning = "HOST:PORT of the launcher's UDP socket each worker sends its metrics to",
     .see = "docs/observability.md",
     .details = "one datagram per PADDLE_METRICS_PERIOD_S from a background thread, never "
                "blocking a step (Note [Metrics push])",
     .also_launcher = true},
    {.name = "PADDLE_METRICS_PERIOD_S",
     .type = T::kSeconds,
     .reader = R::kLibrary,
     .default_text = "1",
     .meaning = "seconds between a worker's metrics snapshots to PADDLE_METRICS_ADDR",
     .see = "docs/observability.md"},
    {.name = "PADDLE_NNODES",
     .type = T::kString,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun",
     .meaning = "--nnodes as given to paddlerun (N or MIN:MAX)",
     .see = "docs/launch.md"},
    {.name = "PADDLE_PIECE_BYTES",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "262144 (256 KiB); rank 0's choice applies to all",
     .meaning = "bytes per piece of a pipelined collective algorithm",
     .see = "Note [Sizes when ranks outnumber cores]",
     .details = "the same on every rank; 256 KiB was the best of 64 KiB to 4 MiB measured with a "
                "core per rank and with ranks sharing cores (docs/performance-notes.md)",
     .min = 4096,
     .max = int64_t{1} << 30},
    {.name = "PADDLE_RESTART_COUNT",
     .type = T::kString,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun",
     .meaning = "how many times paddlerun restarted the job before this attempt (0 at first)",
     .see = "docs/launch.md"},
    {.name = "PADDLE_RUN_ID",
     .type = T::kString,
     .reader = R::kWorkers,
     .default_text = "set by paddlerun",
     .meaning = "the job's --rdzv-id",
     .see = "docs/launch.md"},
    {.name = "PADDLE_SHM_CMA",
     .type = T::kBool,
     .reader = R::kLibrary,
     .default_text = "1",
     .meaning = "1 copies large messages between local ranks with process_vm_readv",
     .see = "paddle/collective/transport/shm/cma.h",
     .details = "0: the shm transport never uses process_vm_readv, and large messages stream "
                "through the ring; 1 uses it where the kernel allows"},
    {.name = "PADDLE_SHM_SLOT_BYTES",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "524288 (512 KiB), up to 2 MiB when local ranks outnumber cores",
     .meaning = "bytes per rank and round of the shared-memory node workspace",
     .see = "Note [Sizes when ranks outnumber cores]",
     .details = "the same on every rank (rank 0 decides for all); with more local ranks than cores "
                "the default is 8 MiB / local ranks, clamped to 512 KiB..2 MiB",
     .min = 4096,
     .max = int64_t{64} << 20,
     .multiple_of = 4096},
    {.name = "PADDLE_SHM_SPIN_US",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "50 when every local rank has a core, else 0",
     .meaning = "microseconds a shared-memory wait spins before sleeping",
     .details = "the spin never yields the core (docs/performance-notes.md, \"Spinning\"), and "
                "waits stop spinning while spinning stops paying (for example when the peer shares "
                "this CPU)",
     .min = 0,
     .max = kMaxMicros},
    {.name = "PADDLE_SOCKET_BUFFER_BYTES",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "0",
     .meaning =
         "SO_SNDBUF/SO_RCVBUF of TCP transport sockets in bytes; 0 leaves them to the kernel",
     .min = 0,
     .max = int64_t{1} << 30},
    {.name = "PADDLE_SOCKET_IFNAME",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "the host name's address if not loopback, else 127.0.0.1",
     .meaning = "the interface (eth0) or address the TCP transport and Gloo listen on",
     .see = "paddle/collective/net/socket_address.h",
     .details = "an interface name (eth0) or a literal address of this host (10.0.0.2, ::1); "
                "TransportOptions.interface_name wins over it",
     .also_launcher = true},
    {.name = "PADDLE_STALL_WARNING_S",
     .type = T::kSeconds,
     .reader = R::kLibrary,
     .default_text = "60",
     .meaning = "seconds a gradient bucket may wait before the reducer warns; 0 turns it off",
     .details = "the warning (level WARN, subsystem TRAIN) names the bucket, its parameters, the "
                "iteration and, from the second warning on, the ranks that have not reached it"},
    {.name = "PADDLE_STORE_TIMEOUT_S",
     .type = T::kSeconds,
     .reader = R::kLibrary,
     .default_text = "300",
     .meaning = "seconds one store operation (get, wait) may take; 0 or inf for no limit",
     .see = "paddle/core/deadline.h",
     .inf_ok = true},
    {.name = "PADDLE_STORE_TOKEN",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "made by paddlerun per job; unset outside it: no authentication",
     .meaning = "the job's shared secret; the TCP store and the TCP transport authenticate with it",
     .see = "docs/security.md",
     .details = "challenge-response, never sent in clear; paddlerun makes one per job and hands it "
                "to its workers (--no-auth turns it off, --token-file supplies one)",
     .also_launcher = true},
    {.name = "PADDLE_TCP_BUSY_POLL_US",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "0",
     .meaning = "microseconds the TCP I/O thread polls after its last event",
     .min = 0,
     .max = kMaxMicros},
    {.name = "PADDLE_TCP_MAX_UNEXPECTED_MB",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "4096",
     .meaning = "MiB one TCP link may buffer for messages that arrive before their receive",
     .see = "Note [Unexpected-message limit]",
     .details = "a peer announcing more (a corrupted or hostile sender, or a message far larger "
                "than any receive this rank posts) poisons the transport with an error naming the "
                "peer and the size instead of allocating it",
     .min = 1,
     .max = int64_t{1} << 20},
    {.name = "PADDLE_TCP_WAITER_READS",
     .type = T::kBool,
     .reader = R::kLibrary,
     .default_text = "1",
     .meaning = "1 lets a waiting thread move its sockets' data itself",
     .see = "Note [Waiter drives]",
     .details = "1: a thread waiting for a send or receive moves the data of all the transport's "
                "sockets itself while the I/O thread stops watching them until no thread has "
                "waited for 10 ms; 0: only the I/O thread moves data and waiters sleep"},
    {.name = "PADDLE_TCP_WAIT_SPIN_US",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "automatic: 100 when the peers share the host and cores suffice, else 0",
     .meaning = "microseconds a TCP wait polls before sleeping",
     .see = "Note [Automatic spin]",
     .details = "unset: 100 when the ranks on this host are no more than its usable CPUs, else 0. "
                "With a core per rank spinning roughly halves small-message latency; with more "
                "ranks than cores it is much slower (docs/performance-notes.md)",
     .min = 0,
     .max = kMaxMicros},
    {.name = "PADDLE_TIMELINE",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "no timeline",
     .meaning = "a file rank 0 writes a Chrome trace of every rank's training steps to",
     .see = "paddle/parallel/timeline.h",
     .details = "chrome://tracing or Perfetto; spans: data, forward, backward, optimizer and each "
                "bucket's allreduce, one row per rank"},
    {.name = "PADDLE_TIMEOUT_S",
     .type = T::kSeconds,
     .reader = R::kLibrary,
     .default_text = "300",
     .meaning = "seconds one collective may take; 0 or inf for no limit",
     .see = "paddle/core/deadline.h",
     .details = "paddlerun also takes it as the default of --exit-timeout",
     .inf_ok = true,
     .also_launcher = true},
    {.name = "PADDLE_TRANSPORT",
     .type = T::kChoice,
     .reader = R::kLibrary,
     .default_text = "auto",
     .meaning = "what carries the native backend's messages: shared memory within a host and "
                "TCP between hosts (auto), or only tcp, shm or ucx",
     .see = "Note [Transport choice]",
     .details = "auto: the shm transport and the node workspace among the ranks of a host, a "
                "hierarchical allreduce across hosts over TCP; tcp: every byte through sockets; "
                "shm: all ranks must share one host; ucx: UCX between ranks plus the node "
                "workspace. CommunicatorOptions.transport wins over it",
     .choices = "auto,tcp,shm,ucx"},
    {.name = "PADDLE_TUNING_PARAMS",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "the measured allreduce table",
     .meaning = "a file from `tools/simulate tune --emit` whose fitted cost model picks the "
                "native backend's allreduce algorithm per size, and DDP's bucket caps",
     .see = "docs/simulator.md",
     .details = "rank 0 takes the file's link for the transport found at start-up (tcp, shm, "
                "ucx; @R entries for R ranks per host preferred) and publishes it to the group; "
                "without an entry for that transport the table applies. PADDLE_ALGO still "
                "forces one algorithm. A \"bucket FIRST_BYTES BUCKET_BYTES\" line (`tools/"
                "simulate step --search --emit`) sets DDP's bucket caps where DdpOptions leaves "
                "them 0. A malformed file is an error naming the file, line and field"},
    {.name = "PADDLE_UCX_LIBRARY",
     .type = T::kString,
     .reader = R::kLibrary,
     .default_text = "libucp.so.0",
     .meaning = "the UCX libucp that PADDLE_TRANSPORT=ucx loads",
     .details = "libucp is loaded only then, never linked"},
    {.name = "PADDLE_UCX_WAIT_SPIN_US",
     .type = T::kInt,
     .reader = R::kLibrary,
     .default_text = "20",
     .meaning = "microseconds a UCX wait spins before sleeping",
     .details = "UCX's own variables (UCX_TLS, ...) apply as usual; when unset, a ucx transport "
                "sets UCX_KEEPALIVE_INTERVAL=1s, UCX_ZCOPY_THRESH=inf and "
                "UCX_TCP_TX_SEG_SIZE/RX_SEG_SIZE=256k (a dead peer is found within seconds; no "
                "zero-copy sends, which UCX 1.13's tcp transport completes twice when the peer "
                "dies mid-send)",
     .min = 0,
     .max = kMaxMicros},
    {.name = "PADDLE_WORKSPACE",
     .type = T::kString,
     .reader = R::kLauncher,
     .default_text = "set by tools/install-paddlerun",
     .meaning = "the workspace in which paddlerun builds a label (-c opt --config=opt) and "
                "runs its binary from, when not started by bazel run",
     .see = "docs/launch.md"},
};

const Setting& Declared(absl::string_view name, SettingType type) {
  const Setting* setting = FindSetting(name);
  if (setting == nullptr || setting->type != type) {
    // A programming error: abort with the name so the table can be fixed.
    std::fprintf(stderr, "paddle: %.*s is %s in the settings table (paddle/core/settings.cc)\n",
                 static_cast<int>(name.size()), name.data(),
                 setting == nullptr ? "not declared" : "declared with another type");
    std::abort();
  }
  return *setting;
}

std::string Meaning(const Setting& s) {
  return s.default_text[0] == '\0' ? s.meaning
                                   : absl::StrCat(s.meaning, "; unset: ", s.default_text);
}

absl::string_view TypeText(const Setting& s) {
  switch (s.type) {
    case T::kInt:
      return "integer";
    case T::kBool:
      return "boolean";
    case T::kSeconds:
      return "seconds";
    case T::kChoice:
      return "choice";
    case T::kString:
      return "text";
  }
  return "";
}

std::string AcceptedText(const Setting& s) {
  switch (s.type) {
    case T::kInt:
      return absl::StrCat(s.min, " to ", s.max,
                          s.multiple_of > 1 ? absl::StrCat(", a multiple of ", s.multiple_of) : "");
    case T::kBool:
      return "1, true, yes, on / 0, false, no, off";
    case T::kSeconds:
      return s.inf_ok ? "a number >= 0, or inf" : "a finite number >= 0";
    case T::kChoice:
      return absl::StrJoin(absl::StrSplit(s.choices, ','), ", ");
    case T::kString:
      return "any";
  }
  return "";
}

}  // namespace

absl::Span<const Setting> AllSettings() { return kSettings; }

const Setting* FindSetting(absl::string_view name) {
  for (const Setting& s : kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

absl::StatusOr<std::optional<int64_t>> IntSetting(absl::string_view name) {
  const Setting& s = Declared(name, T::kInt);
  absl::StatusOr<std::optional<int64_t>> value = IntFromEnv(s.name, s.min, s.max, Meaning(s));
  if (!value.ok() || !value->has_value() || **value % s.multiple_of == 0) return value;
  return absl::InvalidArgumentError(absl::StrCat(s.name, "=\"", **value, "\" is not a multiple of ",
                                                 s.multiple_of, " (", Meaning(s),
                                                 "); set it to one or unset it for the default"));
}

absl::StatusOr<std::optional<bool>> BoolSetting(absl::string_view name) {
  const Setting& s = Declared(name, T::kBool);
  return BoolFromEnv(s.name, Meaning(s));
}

absl::StatusOr<std::optional<absl::Duration>> SecondsSetting(absl::string_view name) {
  const Setting& s = Declared(name, T::kSeconds);
  return SecondsFromEnv(s.name, s.inf_ok, Meaning(s));
}

absl::StatusOr<std::optional<std::string>> ChoiceSetting(absl::string_view name) {
  const Setting& s = Declared(name, T::kChoice);
  const char* raw = std::getenv(s.name);
  if (raw == nullptr) return std::optional<std::string>();
  const absl::string_view value = absl::StripAsciiWhitespace(raw);
  if (value.empty()) return std::optional<std::string>();
  const std::string lower = absl::AsciiStrToLower(value);
  for (absl::string_view choice : absl::StrSplit(s.choices, ',')) {
    if (lower == choice) return std::optional<std::string>(lower);
  }
  return absl::InvalidArgumentError(absl::StrCat(s.name, "=\"", value, "\" is not one of ",
                                                 AcceptedText(s), " (", Meaning(s),
                                                 "); set it to one or unset it for the default"));
}

std::optional<std::string> StringSetting(absl::string_view name) {
  const Setting& s = Declared(name, T::kString);
  const char* raw = std::getenv(s.name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return std::string(raw);
}

absl::Status CheckSettings() {
  for (const Setting& s : kSettings) {
    absl::Status status;
    switch (s.type) {
      case T::kInt:
        status = IntSetting(s.name).status();
        break;
      case T::kBool:
        status = BoolSetting(s.name).status();
        break;
      case T::kSeconds:
        status = SecondsSetting(s.name).status();
        break;
      case T::kChoice:
        status = ChoiceSetting(s.name).status();
        break;
      case T::kString:
        break;
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string ConfigurationMarkdown() {
  struct Section {
    std::vector<SettingReader> readers;
    const char* title;
    const char* intro;
  };
  const Section sections[] = {
      {{R::kLibrary},
       "Read by the library",
       "Read by the C++ library, and so by every program, the Python package and the benchmarks. "
       "Those marked (also paddlerun) are read or set by the launcher as well."},
      {{R::kLauncher, R::kPython, R::kBench},
       "Read by the tools",
       "Read only by the launcher (tools/paddlerun), the Python package or a benchmark."},
      {{R::kWorkers},
       "Set for the workers",
       "Set by the launcher for the program it starts; Paddle Collective itself does not read "
       "them."},
      {{R::kBuild},
       "Read at build time",
       "Read by Bazel's CUDA configuration or by tools/test, not by programs."},
  };
  std::string out =
      "# Configuration\n\n"
      "<!-- Generated from paddle/core/settings.cc by //paddle/core:configuration_doc; do not "
      "edit. //tests/core:settings_test checks that this file matches the table. -->\n\n"
      "Every `PADDLE_*` environment variable, from the one table in `paddle/core/settings.cc` "
      "(Note [Settings table]). Unset means the default, and so does blank for every type "
      "but text; surrounding whitespace is ignored except in text, which is taken as given. "
      "A malformed value is an error naming the variable, its value and what it "
      "accepts, never a silent fallback to the default (from Python: a ValueError). Options "
      "set in code "
      "(`CommunicatorOptions`, `TransportOptions`, launcher flags) win over the environment "
      "where both exist.\n\n"
      "The launcher's own flags are in [launch.md](launch.md); the variables of the `env://` "
      "rendezvous (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`) are those "
      "of torchrun, also described there.\n";
  for (const Section& section : sections) {
    absl::StrAppend(&out, "\n## ", section.title, "\n\n", section.intro, "\n\n",
                    "| Variable | Type | Accepts | Default | Meaning |\n",
                    "|---|---|---|---|---|\n");
    for (const Setting& s : kSettings) {
      if (std::find(section.readers.begin(), section.readers.end(), s.reader) ==
          section.readers.end()) {
        continue;
      }
      std::string meaning = s.meaning;
      if (s.also_launcher) absl::StrAppend(&meaning, " (also paddlerun)");
      if (s.reader == R::kLauncher) absl::StrAppend(&meaning, " (paddlerun)");
      if (s.reader == R::kPython) absl::StrAppend(&meaning, " (Python)");
      if (s.reader == R::kBench) absl::StrAppend(&meaning, " (benchmark)");
      if (s.details[0] != '\0') {
        std::string details = s.details;
        details[0] = absl::ascii_toupper(details[0]);
        absl::StrAppend(&meaning, ". ", details);
      }
      const absl::string_view see = s.see;
      if (!see.empty()) {
        // Links between docs/ files are relative; code paths and Note names are quoted.
        absl::StrAppend(&meaning, "; see ",
                        absl::StartsWith(see, "docs/")
                            ? absl::StrCat("[", see.substr(5), "](", see.substr(5), ")")
                            : absl::StrCat("`", see, "`"));
      }
      absl::StrAppend(&out, "| `", s.name, "` | ", TypeText(s), " | ", AcceptedText(s), " | ",
                      s.default_text, " | ", meaning, " |\n");
    }
  }
  return out;
}

}  // namespace paddle
