// Rendezvous time of N local processes (32 by default) through tcp://, file:// and etcd://.
//
//   bazel run -c opt //bench/micro:rendezvous_bench -- --procs=32 --reps=5
//
// Each repetition starts N processes of this binary at once (paddle/testing/rendezvous_worker.h);
// each times its own Rendezvous() call and then checks the store with a barrier and a value
// exchange. Reported per scheme, as medians over the repetitions:
//   protocol  last process entering Rendezvous() -> last process leaving it: the cost of the
//             rendezvous itself once everyone has started (store setup/connect, join, barrier)
//   skew      first process entering Rendezvous() -> last one entering: process start-up, which
//             every process but the last spends waiting
//   slowest   the longest time one process spent inside Rendezvous() (about skew + protocol)
//   job       first fork -> last exit, start-up and teardown included
// A repetition in which any process fails aborts the benchmark.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "paddle/testing/etcd_server.h"
#include "paddle/testing/rendezvous_worker.h"

namespace paddle {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Figures {
  double protocol_ms = 0;
  double skew_ms = 0;
  double slowest_ms = 0;
  double job_ms = 0;
};

// Runs one job; exits the program if any worker failed.
Figures RunJob(const std::vector<WorkerSpec>& specs, const std::string& scheme) {
  absl::Time start = absl::Now();
  std::vector<WorkerOutcome> out = RunWorkerProcesses(specs, absl::Seconds(300));
  Figures f;
  f.job_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  double first_start = 1e300, last_start = 0, last_end = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    double seconds = RendezvousField(out[r].output, "seconds");
    double start_us = RendezvousField(out[r].output, "start_us");
    double end_us = RendezvousField(out[r].output, "end_us");
    if (out[r].exit_code != 0 || seconds < 0 || start_us < 0 || end_us < 0) {
      std::fprintf(stderr, "%s: worker %zu failed (exit %d):\n%s\n", scheme.c_str(), r,
                   out[r].exit_code, out[r].output.c_str());
      std::exit(1);
    }
    first_start = std::min(first_start, start_us);
    last_start = std::max(last_start, start_us);
    last_end = std::max(last_end, end_us);
    f.slowest_ms = std::max(f.slowest_ms, seconds * 1e3);
  }
  f.protocol_ms = (last_end - last_start) / 1e3;
  f.skew_ms = (last_start - first_start) / 1e3;
  return f;
}

std::vector<WorkerSpec> Specs(int procs, const std::function<std::string(int)>& url) {
  std::vector<WorkerSpec> specs(procs);
  for (int r = 0; r < procs; ++r) specs[r].url = url(r);
  return specs;
}

int BenchMain(int argc, char** argv) {
  int procs = 32;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (absl::ConsumePrefix(&arg, "--procs=") && absl::SimpleAtoi(arg, &procs) && procs > 0) {
      continue;
    }
    arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--reps=") && absl::SimpleAtoi(arg, &reps) && reps > 0) {
      continue;
    }
    std::fprintf(stderr, "usage: %s [--procs=N] [--reps=N]\n", argv[0]);
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/rdzv_bench.XXXXXX");
  if (mkdtemp(&dir[0]) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  absl::StatusOr<std::unique_ptr<EtcdServer>> etcd = EtcdServer::Start();
  if (!etcd.ok()) {
    std::fprintf(stderr, "starting etcd: %s\n", etcd.status().ToString().c_str());
    return 1;
  }

  std::printf("# rendezvous of %d local processes, median of %d repetitions\n", procs, reps);
  std::printf("%-6s %12s %12s %12s %12s\n", "scheme", "protocol(ms)", "skew(ms)", "slowest(ms)",
              "job(ms)");
  for (const std::string scheme : {"tcp", "file", "etcd"}) {
    std::vector<double> protocol, skew, slowest, job;
    // One untimed warm-up repetition, so page cache and etcd's first writes do not count.
    for (int rep = -1; rep < reps; ++rep) {
      std::string tag = absl::StrCat(rep + 1);
      std::function<std::string(int)> url;
      int port = FreeLoopbackPort();
      if (scheme == "tcp") {
        url = [&](int r) {
          return absl::StrCat("tcp://127.0.0.1:", port, "?rank=", r, "&world_size=", procs);
        };
      } else if (scheme == "file") {
        url = [&](int r) {
          return absl::StrCat("file://", dir, "/store", tag, "?rank=", r, "&world_size=", procs);
        };
      } else {
        url = [&](int r) {
          return absl::StrCat("etcd://", (*etcd)->endpoint(), "/bench", tag, "?rank=", r,
                              "&world_size=", procs);
        };
      }
      Figures f = RunJob(Specs(procs, url), scheme);
      if (rep < 0) continue;
      protocol.push_back(f.protocol_ms);
      skew.push_back(f.skew_ms);
      slowest.push_back(f.slowest_ms);
      job.push_back(f.job_ms);
    }
    std::printf("%-6s %12.1f %12.1f %12.1f %12.1f\n", scheme.c_str(), Median(protocol),
                Median(skew), Median(slowest), Median(job));
    std::fflush(stdout);
  }
  rmdir(dir.c_str());  // each job's last worker removed its store file
  return 0;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  int exit_code = 0;
  if (paddle::MaybeRunWorker(argc, argv, &exit_code)) return exit_code;
  return paddle::BenchMain(argc, argv);
}
