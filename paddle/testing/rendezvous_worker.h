// Real rendezvous worker processes for tests and benchmarks.
//
// A test binary re-executes itself (/proc/self/exe) with `--rendezvous_worker URL TIMEOUT_S` as
// its first arguments; its main() hands those to RunRendezvousWorker instead of running tests.
// RunWorkerProcesses starts many such processes at once, each with its own arguments and
// environment, collects their exit codes and output, and kills any still running at its limit.
// FreeLoopbackPort (for a tcp:// URL) comes with child_processes.h.
#ifndef PADDLE_TESTING_RENDEZVOUS_WORKER_H_
#define PADDLE_TESTING_RENDEZVOUS_WORKER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/testing/child_processes.h"

namespace paddle {

constexpr char kWorkerFlag[] = "--rendezvous_worker";

// If argv is a worker command line, runs the worker and sets *exit_code; else returns false.
bool MaybeRunWorker(int argc, char** argv, int* exit_code);

// One rendezvous through `url`, then a barrier and an exchange of values through the store to
// show it works for every rank. Prints "RENDEZVOUS_OK rank=R world_size=N seconds=S start_us=A
// end_us=B" (S: time spent in Rendezvous, which ran from A to B in Unix microseconds) or
// "RENDEZVOUS_ERROR <status>"; returns 0 on success.
int RunRendezvousWorker(const std::string& url, absl::Duration timeout);

struct WorkerSpec {
  std::string url;
  absl::Duration timeout = absl::Seconds(120);
  std::vector<std::pair<std::string, std::string>> env;  // set (or replace) in the worker
};

struct WorkerOutcome {
  int exit_code = -1;  // -1: killed at the limit; 128+N: killed by signal N
  std::string output;  // stdout and stderr
};

// Starts one worker process per spec, all at once, and waits for them up to `limit`.
std::vector<WorkerOutcome> RunWorkerProcesses(const std::vector<WorkerSpec>& specs,
                                              absl::Duration limit);

// A numeric field ("seconds", "start_us", "end_us") of the RENDEZVOUS_OK line, or -1.
double RendezvousField(const std::string& output, absl::string_view field);

}  // namespace paddle

#endif  // PADDLE_TESTING_RENDEZVOUS_WORKER_H_
