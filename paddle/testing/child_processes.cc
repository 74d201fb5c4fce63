// fork + execvpe of test and benchmark children, output in an unlinked temporary file each.
#include "paddle/testing/child_processes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "child_processes: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

int RecordExit(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    if (output_fd_ >= 0) close(output_fd_);
    pid = std::exchange(other.pid, -1);
    exit_code = std::exchange(other.exit_code, kRunning);
    exited = other.exited;
    output_fd_ = std::exchange(other.output_fd_, -1);
    own_group_ = other.own_group_;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  Kill();
  if (output_fd_ >= 0) close(output_fd_);
}

void ChildProcess::Kill() {
  if (!running()) return;
  kill(own_group_ ? -pid : pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  exit_code = -1;
}

bool ChildProcess::Exited() {
  if (!running()) return pid >= 0;
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return false;
  exited = absl::Now();
  exit_code = RecordExit(status);
  if (own_group_) kill(-pid, SIGKILL);  // whatever it left behind in its group
  return true;
}

void ChildProcess::Terminate(absl::Duration grace) {
  if (!running()) return;
  kill(own_group_ ? -pid : pid, SIGTERM);
  const absl::Time give_up = absl::Now() + grace;
  while (!Exited()) {
    if (absl::Now() >= give_up) {
      Kill();
      exited = absl::Now();
      return;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

std::string ChildProcess::Output() const {
  std::string output;
  char buf[1 << 14];
  for (off_t off = 0; output_fd_ >= 0;) {
    const ssize_t n = pread(output_fd_, buf, sizeof(buf), off);
    if (n <= 0) break;
    output.append(buf, n);
    off += n;
  }
  return output;
}

std::vector<ChildProcess> StartChildren(const std::vector<ChildSpec>& specs) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<ChildProcess> children(specs.size());
  std::fflush(nullptr);  // nothing buffered is written twice
  for (size_t i = 0; i < specs.size(); ++i) {
    const ChildSpec& spec = specs[i];
    if (spec.argv.empty()) {
      std::fprintf(stderr, "child_processes: child %zu has an empty argv\n", i);
      std::abort();
    }
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::string out_path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/child.XXXXXX");
    const int out_fd = mkostemp(&out_path[0], O_CLOEXEC);
    if (out_fd < 0) Die(absl::StrCat("mkostemp ", out_path).c_str());
    unlink(out_path.c_str());
    std::vector<std::string> args = spec.argv;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const auto& kv : spec.env) replaced |= absl::StartsWith(*e, kv.first + "=");
      if (!replaced) env.emplace_back(*e);
    }
    for (const auto& kv : spec.env) env.push_back(absl::StrCat(kv.first, "=", kv.second));
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(&a[0]);
    for (std::string& e : env) envp.push_back(&e[0]);
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      if (spec.own_process_group) setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed parent takes its children with it
      if (getppid() != parent) _exit(127);
      dup2(out_fd, 1);
      if (spec.capture_stderr) dup2(out_fd, 2);
      execvpe(argv[0], argv.data(), envp.data());
      const char kFailed[] = "child_processes: exec failed: ";
      (void)!write(2, kFailed, sizeof(kFailed) - 1);
      (void)!write(2, argv[0], std::strlen(argv[0]));
      (void)!write(2, "\n", 1);
      _exit(127);
    }
    if (pid < 0) Die("fork");
    children[i].pid = pid;
    children[i].output_fd_ = out_fd;
    children[i].own_group_ = spec.own_process_group;
  }
  return children;
}

int WaitForChildren(std::vector<ChildProcess>& children, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  size_t left = 0;
  for (const ChildProcess& c : children) left += c.running() ? 1 : 0;
  while (left > 0) {
    bool progress = false;
    for (ChildProcess& c : children) {
      if (!c.running() || !c.Exited()) continue;
      --left;
      progress = true;
    }
    if (left == 0) break;
    if (absl::Now() >= deadline) {
      int killed = 0;
      for (ChildProcess& c : children) {
        if (!c.running()) continue;
        c.Kill();
        c.exited = absl::Now();
        ++killed;
      }
      return killed;
    }
    if (!progress) absl::SleepFor(absl::Milliseconds(2));
  }
  return 0;
}

std::vector<ChildProcess> RunChildren(const std::vector<ChildSpec>& specs, absl::Duration limit) {
  std::vector<ChildProcess> children = StartChildren(specs);
  WaitForChildren(children, limit);
  return children;
}

std::string SelfPath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) Die("readlink /proc/self/exe");
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
    Die("FreeLoopbackPort");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace paddle
