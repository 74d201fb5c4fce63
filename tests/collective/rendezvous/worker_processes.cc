// Worker processes: fork + exec of this very binary, output captured in a temporary file each.
#include "tests/collective/rendezvous/worker_processes.h"

#include <arpa/inet.h>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/collective/rendezvous/store_barrier.h"

extern char** environ;

namespace paddle {

bool MaybeRunWorker(int argc, char** argv, int* exit_code) {
  if (argc < 4 || std::strcmp(argv[1], kWorkerFlag) != 0) return false;
  double seconds = 0;
  if (!absl::SimpleAtod(argv[3], &seconds)) {
    std::fprintf(stderr, "bad worker timeout \"%s\"\n", argv[3]);
    *exit_code = 2;
    return true;
  }
  *exit_code = RunRendezvousWorker(argv[2], absl::Seconds(seconds));
  return true;
}

int RunRendezvousWorker(const std::string& url, absl::Duration timeout) {
  absl::Time start = absl::Now();
  absl::StatusOr<RendezvousResult> result = Rendezvous(url, timeout);
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!result.ok()) {
    std::printf("RENDEZVOUS_ERROR %s\n", result.status().ToString().c_str());
    std::fflush(stdout);
    return 1;
  }
  Store& store = *result->store;
  const int rank = result->rank;
  const int n = result->world_size;
  // Every rank publishes a value and reads its neighbour's after a barrier.
  absl::Status s = store.Set(absl::StrCat("worker/value/", rank), absl::StrCat("v", rank));
  if (s.ok()) s = StoreBarrier(store, "worker/published", rank, n, timeout);
  if (s.ok()) {
    absl::StatusOr<std::string> peer = store.Get(absl::StrCat("worker/value/", (rank + 1) % n));
    if (!peer.ok()) {
      s = peer.status();
    } else if (*peer != absl::StrCat("v", (rank + 1) % n)) {
      s = absl::InternalError(absl::StrCat("rank ", rank, " read \"", *peer, "\" from its peer"));
    }
  }
  // Rank 0 may host the store: it leaves only after everyone else is done with it.
  if (s.ok() && rank != 0) s = store.Set(absl::StrCat("worker/left/", rank), "");
  if (s.ok() && rank == 0) {
    std::vector<std::string> left;
    for (int r = 1; r < n; ++r) left.push_back(absl::StrCat("worker/left/", r));
    s = store.Wait(left, timeout);
  }
  if (!s.ok()) {
    std::printf("RENDEZVOUS_ERROR after rendezvous: %s\n", s.ToString().c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("RENDEZVOUS_OK rank=%d world_size=%d seconds=%.6f start_us=%lld end_us=%lld\n", rank,
              n, seconds, static_cast<long long>(absl::ToUnixMicros(start)),
              static_cast<long long>(absl::ToUnixMicros(start + absl::Seconds(seconds))));
  std::fflush(stdout);
  return 0;
}

std::vector<WorkerOutcome> RunWorkerProcesses(const std::vector<WorkerSpec>& specs,
                                              absl::Duration limit) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) {
    std::perror("readlink /proc/self/exe");
    std::abort();
  }
  self[len] = '\0';
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<WorkerOutcome> outcomes(specs.size());
  std::vector<pid_t> pids(specs.size(), -1);
  std::vector<int> out_fds(specs.size(), -1);
  std::fflush(nullptr);
  for (size_t i = 0; i < specs.size(); ++i) {
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::string out_path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/worker.XXXXXX");
    out_fds[i] = mkstemp(&out_path[0]);
    if (out_fds[i] < 0) {
      std::perror("mkstemp");
      std::abort();
    }
    unlink(out_path.c_str());
    std::vector<std::string> args = {self, kWorkerFlag, specs[i].url,
                                     absl::StrCat(absl::ToDoubleSeconds(specs[i].timeout))};
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
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed test takes its workers with it
      if (getppid() != parent) _exit(127);
      dup2(out_fds[i], 1);
      dup2(out_fds[i], 2);
      execve(self, argv.data(), envp.data());
      _exit(127);
    }
    if (pid < 0) {
      std::perror("fork");
      std::abort();
    }
    pids[i] = pid;
  }
  size_t left = specs.size();
  absl::Time deadline = absl::Now() + limit;
  while (left > 0) {
    bool progress = false;
    for (size_t i = 0; i < specs.size(); ++i) {
      int status = 0;
      if (pids[i] < 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      outcomes[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids[i] = -1;
      --left;
      progress = true;
    }
    if (left == 0) break;
    if (absl::Now() >= deadline) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (pids[i] < 0) continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
        outcomes[i].exit_code = -1;
      }
      break;
    }
    if (!progress) absl::SleepFor(absl::Milliseconds(2));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    char buf[4096];
    for (off_t off = 0;;) {
      ssize_t n = pread(out_fds[i], buf, sizeof(buf), off);
      if (n <= 0) break;
      outcomes[i].output.append(buf, n);
      off += n;
    }
    close(out_fds[i]);
  }
  return outcomes;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t addr_len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    std::perror("FreeLoopbackPort");
    std::abort();
  }
  close(fd);
  return ntohs(addr.sin_port);
}

double RendezvousField(const std::string& output, absl::string_view field) {
  size_t at = output.find("RENDEZVOUS_OK");
  if (at == std::string::npos) return -1;
  at = output.find(absl::StrCat(" ", field, "="), at);
  if (at == std::string::npos) return -1;
  at += field.size() + 2;
  double value = -1;
  size_t end = output.find_first_of(" \n", at);
  if (!absl::SimpleAtod(output.substr(at, end - at), &value)) return -1;
  return value;
}

}  // namespace paddle
