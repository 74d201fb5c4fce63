// Tests of the shared-memory transport: ranks as threads over a HashStore for the data path
// (eager, CMA and streamed messages), matching and failure rules, and real processes over a
// TcpStoreServer for large exchanges with and without CMA, ranks on "different hosts", and a rank
// killed with SIGKILL. Every payload is made from (seed, sender rank, message index) and checked
// byte for byte. The test binary re-executes itself as the worker processes (see main()).
#include "paddle/collective/transport/shm/shm_transport.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/collective/transport/shm/shm_ring.h"
#include "paddle/core/logging.h"
#include "tests/collective/transport/transport_conformance.h"
#include "tests/collective/transport/transport_test_harness.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

constexpr char kWorkerFlag[] = "--shm_transport_worker";
constexpr absl::Duration kLong = kLongWait;

void RunRanks(int world, const std::function<void(RankContext&)>& body) {
  RunRankThreads(world, CreateShmTransport, body);
}

// ---- The conformance suite (transport_conformance.h) -------------------------------------------

// Around the points where the protocol changes: eager, ring-streamed, CMA.
std::vector<size_t> ExchangeSizes(int) {
  return {0,
          1,
          4096,
          kShmEagerMaxBytes,
          kShmEagerMaxBytes + 1,
          kShmRingBytes - 1,
          kShmRingBytes + 1,
          (1 << 20) + 3,
          kLargeBytes};
}

// CMA is on by default (Note in cma.h); the variant without it streams large messages through the
// rings, so the suite runs over both.
TransportConformanceParam ShmParam(bool cma) {
  TransportConformanceParam param("shm", CreateShmTransport);
  if (!cma) {
    param.name = "shm_without_cma";
    param.env = {{"PADDLE_SHM_CMA", "0"}};
  }
  param.ping_bytes = 4096;
  param.ping_is_eager = true;
  param.exchange_sizes = ExchangeSizes;
  // Eager, CMA or streamed, interleaved.
  param.one_tag_messages = 120;
  param.one_tag_size_modulus = 200000;
  param.tag_size_step = 30001;
  param.pair_bytes = 200000;
  param.aborted_peer_named = "peer rank 0 (pid ";
  param.peer_sees_aborted_code = true;
  return param;
}

INSTANTIATE_TRANSPORT_CONFORMANCE(Shm, ShmParam(true), testing::Range(2, 9));
INSTANTIATE_TRANSPORT_CONFORMANCE(ShmWithoutCma, ShmParam(false), testing::Values(3));

// ---- Matching ----------------------------------------------------------------------------------

TEST(ShmTransportTest, ReceivePostedBeforeSendAndAfterArrival) {
  const size_t big = (1 << 20) + 3;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      ctx.barrier->Wait();
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 1, big).data(), big, 1)));
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 3, 8).data(), 8, 3)));
      auto large_unexpected = ch.Send(Payload(0, 2, big).data(), big, 2);
      ctx.barrier->Wait();
      ASSERT_OK(WaitLong(*large_unexpected));
      return;
    }
    std::vector<char> before(big);
    auto first = ch.Recv(before.data(), big, 1);
    ctx.barrier->Wait();
    ASSERT_OK(WaitLong(*first));
    EXPECT_EQ(Mismatch(before, 0, 1), "");
    std::vector<char> marker(8);
    ASSERT_OK(WaitLong(*ch.Recv(marker.data(), 8, 3)));  // arrived while nobody waited
    EXPECT_EQ(Mismatch(marker, 0, 3), "");
    ctx.barrier->Wait();  // tag 2 is on its way
    absl::SleepFor(absl::Milliseconds(20));
    std::vector<char> after(big);
    ASSERT_OK(WaitLong(*ch.Recv(after.data(), big, 2)));
    EXPECT_EQ(Mismatch(after, 0, 2), "");
  });
}

TEST(ShmTransportTest, PostedReceiveNobodyWaitsOnCompletesInTheBackground) {
  const size_t big = (1 << 20) + 3;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      // Needs rank 1's acknowledgement, which only its background thread can send.
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 4, big).data(), big, 4)));
      ctx.barrier->Wait();
      return;
    }
    std::vector<char> got(big);
    auto recv = ch.Recv(got.data(), big, 4);
    ctx.barrier->Wait();
    EXPECT_TRUE(recv->IsCompleted());
    ASSERT_OK(WaitLong(*recv));
    EXPECT_EQ(Mismatch(got, 0, 4), "");
  });
}

// ---- Failures ----------------------------------------------------------------------------------

TEST(ShmTransportTest, DestroyedPeerFailsEveryPendingRequestNamingIt) {
  RunRanks(3, [&](RankContext& ctx) {
    std::vector<char> small(16);
    if (ctx.rank == 2) {
      ctx.barrier->Wait();  // the others have posted their receives
      ctx.transport.reset();
      return;
    }
    std::vector<std::unique_ptr<TransportRequest>> pending;
    if (ctx.rank == 0) {
      pending.push_back(ctx.t().channel(2).Recv(small.data(), 16, 9));   // never sent
      pending.push_back(ctx.t().channel(1).Recv(small.data(), 16, 10));  // never sent
    } else {
      pending.push_back(ctx.t().channel(0).Recv(small.data(), 16, 11));  // never sent
    }
    ctx.barrier->Wait();
    for (auto& request : pending) {
      absl::Status status = request->Wait(Deadline::After(absl::Seconds(60)));
      EXPECT_FALSE(status.ok());
      EXPECT_FALSE(absl::IsDeadlineExceeded(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 2 (pid ")) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "was destroyed")) << status;
    }
    // Later requests fail at once with the same cause.
    auto later = ctx.t().channel(1 - ctx.rank).Send(small.data(), 16, 12);
    EXPECT_TRUE(later->IsCompleted());
    absl::Status status = WaitLong(*later);
    EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 2")) << status;
  });
}

// Note [Drain before blaming] (shm_transport.cc): rank 0 delivers everything, then destroys its
// transport at once; the other ranks' receives must still succeed. Even iterations: they are slow
// to wait (rank 0 is gone by then). Odd ones: they already wait, longer than one health-check
// interval, when the data and the teardown flag arrive together.
TEST(ShmTransportTest, PeerDestroyedAfterDeliveringFailsNothing) {
  constexpr int kIterations = 30;
  constexpr size_t kBytes = 4096;
  for (int world = 2; world <= 3; ++world) {
    for (int it = 0; it < kIterations; ++it) {
      const bool waiting = it % 2 == 1;
      RunRanks(world, [&](RankContext& ctx) {
        std::vector<char> token(16, 'x');
        if (ctx.rank == 0) {
          std::vector<std::vector<char>> tokens(static_cast<size_t>(world), token);
          for (int p = 1; p < world; ++p) {
            ASSERT_OK(
                WaitLong(*ctx.t().channel(p).Recv(tokens[static_cast<size_t>(p)].data(), 16, 2)));
          }
          if (waiting) absl::SleepFor(absl::Milliseconds(60 + it % 7));
          std::vector<std::unique_ptr<TransportRequest>> sends;
          for (int p = 1; p < world; ++p) {
            sends.push_back(ctx.t().channel(p).Send(Payload(0, p, kBytes).data(), kBytes, 1));
          }
          for (auto& send : sends) ASSERT_OK(WaitLong(*send));
          ctx.transport.reset();  // at once, as destroy_process_group() after a barrier
          return;
        }
        std::vector<char> got(kBytes);
        auto recv = ctx.t().channel(0).Recv(got.data(), kBytes, 1);
        ASSERT_OK(WaitLong(*ctx.t().channel(0).Send(token.data(), 16, 2)));
        if (!waiting) absl::SleepFor(absl::Milliseconds(2 + it % 3));
        absl::Status status = WaitLong(*recv);
        EXPECT_TRUE(status.ok()) << "world " << world << " iteration " << it << ": " << status;
        if (status.ok()) {
          EXPECT_EQ(Mismatch(got, 0, static_cast<uint64_t>(ctx.rank)), "");
        }
      });
    }
  }
}

TEST(ShmTransportTest, SizeMismatchOfLargeMessage) {
  ExpectSizeMismatch(CreateShmTransport, 3 << 20, 1 << 20, true);
}

// ---- Setup -------------------------------------------------------------------------------------

TEST(ShmTransportTest, MalformedCmaVariableIsAnErrorNamingIt) {
  ScopedEnv bad("PADDLE_SHM_CMA", "maybe");
  auto store = std::make_shared<HashStore>();
  absl::StatusOr<std::unique_ptr<Transport>> results[2];
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      TransportOptions options;
      options.rank = rank;
      options.world_size = 2;
      options.store = store;
      options.connect_timeout = absl::Seconds(30);
      results[rank] = CreateShmTransport(options);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const auto& result : results) {
    ASSERT_FALSE(result.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
    EXPECT_TRUE(absl::StrContains(result.status().message(), "PADDLE_SHM_CMA=\"maybe\""))
        << result.status();
  }
}

// ---- Real processes ----------------------------------------------------------------------------

uint64_t PidNamespaceInode() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The /dev/shm names the workers' processes left behind. Segments have no name (Note [Nameless
// segments] in shm_segment.cc), so there must be none, however a worker died.
std::vector<std::string> LeftoverSegments(const std::vector<WorkerProcess>& workers) {
  std::vector<std::string> left;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return left;
  while (struct dirent* entry = readdir(dir)) {
    for (const WorkerProcess& w : workers) {
      // The names earlier versions used: /paddle-<pid namespace inode>-<pid>-...
      if (absl::StartsWith(entry->d_name,
                           absl::StrCat("paddle-", PidNamespaceInode(), "-", w.pid, "-"))) {
        left.push_back(entry->d_name);
      }
    }
  }
  closedir(dir);
  return left;
}

constexpr size_t kProcessMessageBytes = (16 << 20) + 7;

// One worker process. "exchange" / "exchange_nocma" (PADDLE_SHM_CMA=0): three rounds of
// all-pairs exchanges of large messages, checked, then a store barrier and exit 0.
// "until_failure": rounds until a request fails, publishing round2/<rank> after round 2; exits 3
// on the failure. "other_host": each rank claims its own host (PADDLE_HOST_ID); setup must fail.
int RunWorker(int port, int rank, int world, const std::string& mode) {
  if (mode == "exchange_nocma") setenv("PADDLE_SHM_CMA", "0", 1);
  if (mode == "other_host") {
    setenv("PADDLE_HOST_ID", absl::StrCat("node", rank % 2).c_str(), 1);
    // Set-up alone must fail, on every rank, naming the hosts.
    TcpStoreOptions store_options;
    store_options.host = "127.0.0.1";
    store_options.port = port;
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
    if (!store.ok()) return 2;
    TransportOptions options;
    options.rank = rank;
    options.world_size = world;
    options.store = std::shared_ptr<Store>(std::move(*store));
    options.store_prefix = mode;
    options.connect_timeout = kLong;
    absl::StatusOr<std::unique_ptr<Transport>> transport = CreateShmTransport(options);
    std::printf("WORKER_SETUP %s\n", transport.status().ToString().c_str());
    return absl::IsFailedPrecondition(transport.status()) ? 0 : 7;
  }
  return RunExchangeWorker(port, rank, world, mode == "until_failure" ? mode : "exchange",
                           CreateShmTransport, kProcessMessageBytes, mode);
}

void ExpectShmProcessesExchange(const std::string& mode) {
  std::vector<WorkerProcess> workers = ExpectProcessesExchange(kWorkerFlag, mode);
  EXPECT_TRUE(LeftoverSegments(workers).empty()) << LeftoverSegments(workers)[0];
}

TEST(ShmTransportProcessTest, FourProcessesExchangeLargeMessagesWithCma) {
  ExpectShmProcessesExchange("exchange");
}

TEST(ShmTransportProcessTest, FourProcessesExchangeLargeMessagesWithoutCma) {
  ExpectShmProcessesExchange("exchange_nocma");
}

TEST(ShmTransportProcessTest, RanksOnDifferentHostsAreRejected) {
  std::unique_ptr<TcpStoreServer> server = StartLoopbackStoreServer();
  ASSERT_NE(server, nullptr);
  std::vector<WorkerProcess> workers =
      StartExchangeWorkers(kWorkerFlag, 3, server->port(), "other_host");
  WaitForWorkerProcesses(workers, absl::Seconds(120));
  for (const WorkerProcess& w : workers) {
    std::string output = w.Output();
    EXPECT_EQ(w.exit_code, 0) << output;
    for (const char* part :
         {"FAILED_PRECONDITION", "different hosts", "rank 0 (pid ", ") on 'node0'", "rank 1 (pid ",
          ") on 'node1'", "PADDLE_TRANSPORT=tcp"}) {
      EXPECT_TRUE(absl::StrContains(output, part)) << part << " not in " << output;
    }
  }
  EXPECT_TRUE(LeftoverSegments(workers).empty()) << LeftoverSegments(workers)[0];
}

TEST(ShmTransportProcessTest, KilledProcessFailsTheOthersNamingIt) {
  std::vector<WorkerProcess> workers = ExpectKilledProcessNamed(
      kWorkerFlag, "until_failure", absl::Seconds(5),
      [](const WorkerProcess& victim) { return absl::StrCat("rank 3 (pid ", victim.pid); });
  EXPECT_TRUE(LeftoverSegments(workers).empty()) << LeftoverSegments(workers)[0];
}

}  // namespace
}  // namespace paddle

// See the same suppressions in tcp_transport_test.cc (Note [Locks and ThreadSanitizer]).
int main(int argc, char** argv) {
  const int worker =
      paddle::MaybeRunExchangeWorker(argc, argv, paddle::kWorkerFlag, paddle::RunWorker);
  if (worker >= 0) return worker;
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
