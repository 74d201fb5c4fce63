// Child processes for tests and benchmarks: the one fork + exec of the project's test and bench
// code (worker ranks that re-execute their own binary, etcd, the PyTorch and MPI peers).
//
//   std::vector<ChildProcess> children = StartChildren(specs);
//   ... kill one of them, watch a port, ...
//   WaitForChildren(children, absl::Seconds(60));   // kills what is left at the limit
//   EXPECT_EQ(children[0].exit_code, 0) << children[0].Output();
//
// Each child's output goes to an unlinked temporary file (in $TEST_TMPDIR when set), so it can
// be read at any time, even while the child still runs, and never fills a pipe. A child dies with
// the thread that started it (PR_SET_PDEATHSIG), so a crashed test or benchmark leaves nothing
// running. Nothing here blocks without a limit.
#ifndef PADDLE_TESTING_CHILD_PROCESSES_H_
#define PADDLE_TESTING_CHILD_PROCESSES_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace paddle {

struct ChildSpec {
  // argv[0] is a path, or a program name looked up in PATH.
  std::vector<std::string> argv;
  // Set (or replaced) in the child's environment; the rest is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  // true: stderr goes to the output file with stdout; false: it stays the parent's, so a
  // benchmark's children log where the benchmark does.
  bool capture_stderr = true;
  // true: the child leads its own process group, and the whole group is killed when the child
  // exits or passes the limit (for children that start processes of their own, like mpirun).
  bool own_process_group = false;
};

// One started child. Move-only: it owns the output file, and destroying a child that still runs
// kills and reaps it.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Everything the child wrote so far (stdout, and stderr when captured).
  std::string Output() const;
  bool running() const { return pid >= 0 && exit_code == kRunning; }
  // Whether the child has exited (recording exit_code and exited), without waiting.
  bool Exited();
  // SIGTERM, then SIGKILL if it has not exited within `grace`; reaps it either way.
  void Terminate(absl::Duration grace);

  static constexpr int kRunning = -2;
  pid_t pid = -1;
  // kRunning until it exits; then its exit status, 128 + N if killed by signal N, or -1 if it was
  // killed at WaitForChildren's limit.
  int exit_code = kRunning;
  absl::Time exited;  // when WaitForChildren saw it exit

 private:
  friend std::vector<ChildProcess> StartChildren(const std::vector<ChildSpec>& specs);
  friend int WaitForChildren(std::vector<ChildProcess>& children, absl::Duration limit);
  void Kill();
  int output_fd_ = -1;
  bool own_group_ = false;
};

// Starts one child per spec, all at once. A child whose program cannot be executed exits 127
// with the reason in its output. Aborts with a message if fork or the output file fails.
std::vector<ChildProcess> StartChildren(const std::vector<ChildSpec>& specs);

// Waits until every child has exited or `limit` has passed; kills (SIGKILL) and reaps those still
// running then, setting their exit_code to -1. Returns how many were killed.
int WaitForChildren(std::vector<ChildProcess>& children, absl::Duration limit);

// StartChildren, then WaitForChildren.
std::vector<ChildProcess> RunChildren(const std::vector<ChildSpec>& specs, absl::Duration limit);

// The path of this executable (/proc/self/exe resolved), for children that re-execute it.
std::string SelfPath();

// A loopback port nobody listens on right now (bind to port 0, read it, release it). Another
// process may take it before it is used; callers that host on it retry with a new one.
int FreeLoopbackPort();

}  // namespace paddle

#endif  // PADDLE_TESTING_CHILD_PROCESSES_H_
