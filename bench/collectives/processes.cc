// fork + execvp of the benchmark's children, stdout captured in an unlinked temporary file each.
#include "bench/collectives/processes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace paddle {
namespace bench {

std::vector<ProcessOutcome> RunProcesses(const std::vector<ProcessSpec>& specs,
                                         absl::Duration limit) {
  std::vector<ProcessOutcome> outcomes(specs.size());
  std::vector<pid_t> pids(specs.size(), -1);
  std::vector<int> out_fds(specs.size(), -1);
  std::fflush(nullptr);
  for (size_t i = 0; i < specs.size(); ++i) {
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    char path[] = "/tmp/paddle-bench.XXXXXX";
    out_fds[i] = mkstemp(path);
    if (out_fds[i] < 0) {
      std::perror("mkstemp");
      std::exit(1);
    }
    unlink(path);
    std::vector<std::string> args = specs[i].argv;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const auto& kv : specs[i].env) replaced |= absl::StartsWith(*e, kv.first + "=");
      if (!replaced) env.push_back(*e);
    }
    for (const auto& kv : specs[i].env) env.push_back(absl::StrCat(kv.first, "=", kv.second));
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(&a[0]);
    for (std::string& e : env) envp.push_back(&e[0]);
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed benchmark takes its children with it
      if (getppid() != parent) _exit(127);
      dup2(out_fds[i], 1);
      execvpe(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    pids[i] = pid;
  }
  size_t left = specs.size();
  const absl::Time deadline = absl::Now() + limit;
  while (left > 0) {
    bool progress = false;
    for (size_t i = 0; i < specs.size(); ++i) {
      int status = 0;
      if (pids[i] < 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      outcomes[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      kill(-pids[i], SIGKILL);  // whatever it left behind in its group
      pids[i] = -1;
      --left;
      progress = true;
    }
    if (left == 0) break;
    if (absl::Now() >= deadline) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (pids[i] < 0) continue;
        kill(-pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
        outcomes[i].exit_code = -1;
      }
      break;
    }
    if (!progress) absl::SleepFor(absl::Milliseconds(5));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    char buf[1 << 14];
    for (off_t off = 0;;) {
      const ssize_t n = pread(out_fds[i], buf, sizeof(buf), off);
      if (n <= 0) break;
      outcomes[i].output.append(buf, n);
      off += n;
    }
    close(out_fds[i]);
  }
  return outcomes;
}

std::string SelfPath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    std::perror("readlink /proc/self/exe");
    std::exit(1);
  }
  return std::string(self, len);
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t addr_len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    std::perror("FreeLoopbackPort");
    std::exit(1);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace bench
}  // namespace paddle
