// The native communicator across real processes: ranks are communicator_worker processes
// (fork + exec) that meet through a TcpStoreServer hosted by this test, on loopback.
//   - every collective runs and checks its results on 3 and 4 processes;
//   - one of 4 processes is killed with SIGKILL in the middle of a 64 MiB allreduce: every other
//     rank fails within its timeout, with a message naming the killed rank.
// All run with PADDLE_TRANSPORT=tcp (sockets only), auto (the ranks share a node workspace) and
// ucx (UCX between ranks, loaded at run time, plus the node workspace),
// set in this process's environment, which the workers inherit.
#include <signal.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "tests/collective/transport/transport_test_harness.h"

namespace paddle {
namespace {

constexpr absl::Duration kLong = absl::Seconds(240);

// The worker binary, from this test's runfiles.
std::string WorkerPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "paddle",
                      "/tests/collective/communicator_worker");
}

std::vector<WorkerProcess> StartWorkers(int world, int port, const std::string& mode) {
  std::vector<std::vector<std::string>> args;
  for (int rank = 0; rank < world; ++rank) {
    args.push_back({absl::StrCat(port), absl::StrCat(rank), absl::StrCat(world), mode});
  }
  return StartWorkerProcesses(args, WorkerPath());
}

std::unique_ptr<TcpStoreServer> StartStoreServer() {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

class CommunicatorProcessTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { setenv("PADDLE_TRANSPORT", GetParam(), 1); }
  void TearDown() override { unsetenv("PADDLE_TRANSPORT"); }
};

#if defined(__SANITIZE_THREAD__)
// libucp's threads and locks are invisible to ThreadSanitizer (Debian's build), which then
// reports races in UCX's own code; UCX is checked under AddressSanitizer instead.
#define PADDLE_TEST_TRANSPORTS testing::Values("tcp", "auto")
#else
#define PADDLE_TEST_TRANSPORTS testing::Values("tcp", "auto", "ucx")
#endif
INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorProcessTest, PADDLE_TEST_TRANSPORTS,
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST_P(CommunicatorProcessTest, EveryCollectiveAcrossProcesses) {
  for (int world : {3, 4}) {
    std::unique_ptr<TcpStoreServer> server = StartStoreServer();
    ASSERT_NE(server, nullptr);
    std::vector<WorkerProcess> workers = StartWorkers(world, server->port(), "collectives");
    WaitForWorkerProcesses(workers, kLong);
    for (const WorkerProcess& w : workers) {
      EXPECT_EQ(w.exit_code, 0) << w.Output();
      EXPECT_TRUE(absl::StrContains(w.Output(), "WORKER_OK")) << w.Output();
    }
  }
}

TEST_P(CommunicatorProcessTest, KilledRankFailsEveryOtherRankNamingIt) {
  constexpr int kWorld = 4;
  constexpr int kVictim = 3;
  std::unique_ptr<TcpStoreServer> server = StartStoreServer();
  ASSERT_NE(server, nullptr);
  std::vector<WorkerProcess> workers = StartWorkers(kWorld, server->port(), "until_failure");
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
  WaitForWorkerProcesses(workers, absl::Seconds(120));
  EXPECT_EQ(workers[kVictim].exit_code, 128 + SIGKILL);
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    const WorkerProcess& w = workers[rank];
    const std::string output = w.Output();
    EXPECT_EQ(w.exit_code, 3) << output;
    // The communicator timeout is 30 s; a dead peer is noticed much sooner than that.
    EXPECT_LT(w.exited - killed, absl::Seconds(30)) << output;
    EXPECT_TRUE(absl::StrContains(output, "WORKER_FAILED")) << output;
    EXPECT_TRUE(absl::StrContains(output, "allreduce #")) << output;
    // Over TCP the peer is named by its address, in shared memory by its pid.
    const std::string culprit =
        std::string(GetParam()) == "tcp"
            ? absl::StrCat("rank ", kVictim, " (127.0.0.1:")
            : absl::StrCat("rank ", kVictim, " (pid ", workers[kVictim].pid);
    EXPECT_TRUE(absl::StrContains(output, culprit)) << output;
  }
}

// Note [Agreement check] across processes: the last rank passes other arguments. Every rank
// fails well within the 120 s timeout, naming a mismatch (the stamps', or over a transport
// possibly the size mismatch it found first, passed on as the poison's cause), and at least one
// names the odd rank's call.
TEST_P(CommunicatorProcessTest, MismatchedCallsFailEveryRank) {
  constexpr int kWorld = 3;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mismatch_count", "allreduce #2 (float32 x 101, sum)"},
      {"mismatch_dtype", "allreduce #2 (int32 x 100, sum)"},
      {"mismatch_op", "broadcast #2 (float32 x 100, root 0)"},
      {"mismatch_root", "broadcast #2 (float32 x 100, root 1)"},
  };
  for (const auto& [mode, odd_call] : cases) {
    std::unique_ptr<TcpStoreServer> server = StartStoreServer();
    ASSERT_NE(server, nullptr);
    const absl::Time start = absl::Now();
    std::vector<WorkerProcess> workers = StartWorkers(kWorld, server->port(), mode);
    WaitForWorkerProcesses(workers, kLong);
    EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << mode;
    int named = 0;
    for (const WorkerProcess& w : workers) {
      const std::string output = w.Output();
      EXPECT_EQ(w.exit_code, 4) << mode << ": " << output;
      EXPECT_TRUE(absl::StrContains(output, "called different collectives") ||
                  absl::StrContains(output, "size mismatch"))
          << mode << ": " << output;
      named += absl::StrContains(output, odd_call) ? 1 : 0;
    }
    EXPECT_GE(named, 1) << mode;
  }
}

}  // namespace
}  // namespace paddle
