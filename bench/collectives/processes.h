// Child processes of the collectives benchmark: our own workers (this binary re-executed), the
// PyTorch peer (N python3 processes) and the MPI peer (one mpirun), started by
// paddle/testing/child_processes.h (which also gives SelfPath and FreeLoopbackPort).
//
// Each child's stdout, where it prints its result rows, goes to a temporary file that is read
// back when it exits; its stderr is the benchmark's own, so logs and errors show up as they
// happen. Each child leads its own process group, so a run that passes its time limit is killed
// with everything it started (mpirun's ranks included).
#ifndef BENCH_COLLECTIVES_PROCESSES_H_
#define BENCH_COLLECTIVES_PROCESSES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "paddle/testing/child_processes.h"

namespace paddle {
namespace bench {

struct ProcessSpec {
  std::vector<std::string> argv;                         // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set or replaced in the child
};

struct ProcessOutcome {
  int exit_code = -1;  // -1: killed at the time limit; 128+N: killed by signal N
  std::string output;  // stdout
};

// Starts every spec at once and waits for all of them, at most `limit`.
inline std::vector<ProcessOutcome> RunProcesses(const std::vector<ProcessSpec>& specs,
                                                absl::Duration limit) {
  std::vector<ChildSpec> children(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    children[i] = {specs[i].argv, specs[i].env, /*capture_stderr=*/false,
                   /*own_process_group=*/true};
  }
  std::vector<ChildProcess> done = RunChildren(children, limit);
  std::vector<ProcessOutcome> outcomes(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    outcomes[i] = {done[i].exit_code, done[i].Output()};
  }
  return outcomes;
}

}  // namespace bench
}  // namespace paddle

#endif  // BENCH_COLLECTIVES_PROCESSES_H_
