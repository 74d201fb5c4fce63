// The native communicator across real processes: ranks are communicator_worker processes
// (fork + exec) that meet through a TcpStoreServer hosted by this test, on loopback.
//   - every collective runs and checks its results on 3 and 4 processes;
//   - one of 4 processes is killed with SIGKILL in the middle of a 64 MiB allreduce: every other
//     rank fails within its timeout, with a message naming the killed rank.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"

namespace paddle {
namespace {

constexpr absl::Duration kLong = absl::Seconds(240);

struct Worker {
  pid_t pid = -1;
  std::string log_path;
  int exit_code = -1;  // 128 + signal if killed
  absl::Time exited;
  std::string Output() const {
    std::ifstream in(log_path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

// The worker binary, from this test's runfiles.
std::string WorkerPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "paddle",
                      "/tests/collective/communicator_worker");
}

std::vector<Worker> StartWorkers(int world, int port, const std::string& mode) {
  std::vector<Worker> workers(world);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string binary = WorkerPath();
  for (int rank = 0; rank < world; ++rank) {
    Worker& w = workers[rank];
    w.log_path = absl::StrCat(tmp ? tmp : "/tmp", "/communicator_worker_", getpid(), "_", mode, "_",
                              world, "_", rank, ".log");
    std::vector<std::string> args = {binary, absl::StrCat(port), absl::StrCat(rank),
                                     absl::StrCat(world), mode};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Everything the child needs is built before fork: it only makes async-signal-safe calls.
    const int fd = open(w.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      dup2(fd, 1);
      dup2(fd, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fd);
    w.pid = pid;
  }
  return workers;
}

// Waits for every worker to exit, up to `limit`; kills the rest then.
void WaitForWorkers(std::vector<Worker>& workers, absl::Duration limit) {
  absl::Time give_up = absl::Now() + limit;
  size_t running = workers.size();
  while (running > 0) {
    for (Worker& w : workers) {
      if (w.exit_code != -1) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.exited = absl::Now();
      w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      --running;
    }
    if (running > 0 && absl::Now() > give_up) {
      for (Worker& w : workers) {
        if (w.exit_code == -1) kill(w.pid, SIGKILL);
      }
      ADD_FAILURE() << running << " worker(s) still running after " << limit << "; killed";
      give_up = absl::InfiniteFuture();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::unique_ptr<TcpStoreServer> StartStoreServer() {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(CommunicatorProcessTest, EveryCollectiveAcrossProcesses) {
  for (int world : {3, 4}) {
    std::unique_ptr<TcpStoreServer> server = StartStoreServer();
    ASSERT_NE(server, nullptr);
    std::vector<Worker> workers = StartWorkers(world, server->port(), "collectives");
    WaitForWorkers(workers, kLong);
    for (const Worker& w : workers) {
      EXPECT_EQ(w.exit_code, 0) << w.Output();
      EXPECT_TRUE(absl::StrContains(w.Output(), "WORKER_OK")) << w.Output();
    }
  }
}

TEST(CommunicatorProcessTest, KilledRankFailsEveryOtherRankNamingIt) {
  constexpr int kWorld = 4;
  constexpr int kVictim = 3;
  std::unique_ptr<TcpStoreServer> server = StartStoreServer();
  ASSERT_NE(server, nullptr);
  std::vector<Worker> workers = StartWorkers(kWorld, server->port(), "until_failure");
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = server->port();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> ready;
  for (int r = 0; r < kWorld; ++r) ready.push_back(absl::StrCat("ready/", r));
  const absl::Status all_ready = (*store)->Wait(ready, kLong);
  ASSERT_TRUE(all_ready.ok()) << all_ready;
  // Everyone is in the middle of 64 MiB allreduces (each takes a good fraction of a second).
  absl::SleepFor(absl::Milliseconds(150));
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(workers[kVictim].pid, SIGKILL), 0);
  WaitForWorkers(workers, absl::Seconds(120));
  EXPECT_EQ(workers[kVictim].exit_code, 128 + SIGKILL);
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    const Worker& w = workers[rank];
    const std::string output = w.Output();
    EXPECT_EQ(w.exit_code, 3) << output;
    // The communicator timeout is 30 s; a dead peer is noticed much sooner than that.
    EXPECT_LT(w.exited - killed, absl::Seconds(30)) << output;
    EXPECT_TRUE(absl::StrContains(output, "WORKER_FAILED")) << output;
    EXPECT_TRUE(absl::StrContains(output, "allreduce #")) << output;
    EXPECT_TRUE(absl::StrContains(output, absl::StrCat("rank ", kVictim, " (127.0.0.1:")))
        << output;
  }
}

}  // namespace
}  // namespace paddle
