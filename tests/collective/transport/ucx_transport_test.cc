// Tests of the UCX transport: ranks as threads over a HashStore for the data path, matching and
// failure rules, and real processes over a TcpStoreServer (UCX_TLS=tcp and UCX's default
// transports) for a large exchange and a rank killed with SIGKILL. Every payload is made from
// (seed, sender rank, message index) and checked byte for byte. The test binary re-executes
// itself as the worker processes (see main()).
#include "paddle/collective/transport/ucx/ucx_transport.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/logging.h"
#include "tests/collective/transport/transport_conformance.h"
#include "tests/collective/transport/transport_test_harness.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

constexpr char kWorkerFlag[] = "--ucx_transport_worker";

// Past 4 ranks as threads, 64 MiB per pair would take the binary well past a minute on 2 cores.
constexpr size_t kLargeBytesManyRanks = std::min(kLargeBytes, size_t{16 << 20} + 5);

void RunRanks(int world, const std::function<void(RankContext&)>& body) {
  RunRankThreads(world, CreateUcxTransport, body);
}

// ---- The conformance suite (transport_conformance.h) -------------------------------------------

TransportConformanceParam UcxParam() {
  TransportConformanceParam param("ucx", CreateUcxTransport);
  param.exchange_sizes = [](int world) {
    return std::vector<size_t>{0, 1, 4096, (1 << 20) + 3,
                               world <= 4 ? kLargeBytes : kLargeBytesManyRanks};
  };
  param.spares_unexpected_buffers = false;
  return param;
}

INSTANTIATE_TRANSPORT_CONFORMANCE(Ucx, UcxParam(), testing::Range(2, 9));

// ---- Matching ----------------------------------------------------------------------------------

// Note [Environment settings]: checked before UCX is loaded, so this needs no UCX library.
TEST(UcxTransportTest, MalformedWaitSpinIsAnErrorNamingIt) {
  for (const char* value : {"-1", "20us", "nan", "99999999999999999999"}) {
    ScopedEnv bad("PADDLE_UCX_WAIT_SPIN_US", value);
    TransportOptions options;
    options.rank = 0;
    options.world_size = 1;
    absl::StatusOr<std::unique_ptr<Transport>> transport = CreateUcxTransport(options);
    ASSERT_FALSE(transport.ok()) << value;
    EXPECT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(transport.status().message(),
                                  absl::StrCat("PADDLE_UCX_WAIT_SPIN_US=\"", value, "\"")))
        << transport.status();
  }
}

TEST(UcxTransportTest, AllSixtyFourTagBitsAndPeersAreMatchedApart) {
  // Tags differing only in bit 63 or 62 (the native backend's control tags), and one tag from two
  // peers: each receive must get exactly its own message (Note [One worker per peer]).
  const std::vector<uint64_t> tags = {5, 5 | (uint64_t{1} << 63), 5 | (uint64_t{1} << 62),
                                      ~uint64_t{0}};
  RunRanks(3, [&](RankContext& ctx) {
    if (ctx.rank != 0) {
      ctx.barrier->Wait();
      for (size_t i = 0; i < tags.size(); ++i) {
        uint64_t index = ctx.rank * 10 + i;
        ASSERT_OK(WaitLong(*ctx.t().channel(0).Send(Payload(ctx.rank, index, 64).data(), 64,
                                                    tags[tags.size() - 1 - i])));
      }
      return;
    }
    std::vector<std::vector<char>> got(2 * tags.size(), std::vector<char>(64));
    std::vector<std::unique_ptr<TransportRequest>> recvs;
    for (int peer = 1; peer <= 2; ++peer) {
      for (size_t i = 0; i < tags.size(); ++i) {
        recvs.push_back(
            ctx.t().channel(peer).Recv(got[(peer - 1) * tags.size() + i].data(), 64, tags[i]));
      }
    }
    ctx.barrier->Wait();
    for (auto& r : recvs) ASSERT_OK(WaitLong(*r));
    for (int peer = 1; peer <= 2; ++peer) {
      for (size_t i = 0; i < tags.size(); ++i) {
        // Tag i was the peer's message (size - 1 - i).
        EXPECT_EQ(
            Mismatch(got[(peer - 1) * tags.size() + i], peer, peer * 10 + (tags.size() - 1 - i)),
            "")
            << "peer " << peer << " tag " << tags[i];
      }
    }
  });
}

TEST(UcxTransportTest, ReceivePostedBeforeSendAndAfterArrival) {
  const size_t big = (1 << 20) + 3;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      ctx.barrier->Wait();
      auto s1 = ch.Send(Payload(0, 1, big).data(), big, 1);
      auto s2 = ch.Send(Payload(0, 2, 4096).data(), 4096, 2);
      auto s3 = ch.Send(Payload(0, 3, 8).data(), 8, 3);
      for (auto* s : {&s1, &s2, &s3}) ASSERT_OK(WaitLong(**s));
      ctx.barrier->Wait();
      return;
    }
    // Posted before the send.
    std::vector<char> before(big);
    auto first = ch.Recv(before.data(), big, 1);
    ctx.barrier->Wait();
    ASSERT_OK(WaitLong(*first));
    EXPECT_EQ(Mismatch(before, 0, 1), "");
    std::vector<char> marker(8);
    ASSERT_OK(WaitLong(*ch.Recv(marker.data(), 8, 3)));
    ctx.barrier->Wait();  // every send completed: tag 2 is in UCX's unexpected queue
    std::vector<char> after(4096);
    ASSERT_OK(WaitLong(*ch.Recv(after.data(), 4096, 2)));
    EXPECT_EQ(Mismatch(after, 0, 2), "");
  });
}

// ---- Failures ----------------------------------------------------------------------------------

TEST(UcxTransportTest, SizeMismatchSmallerMessagePostedReceive) {
  ExpectSizeMismatch(CreateUcxTransport, 100, 300, true);
}
TEST(UcxTransportTest, SizeMismatchSmallerMessageUnexpected) {
  ExpectSizeMismatch(CreateUcxTransport, 100, 300, false);
}
TEST(UcxTransportTest, SizeMismatchLargeRendezvousMessage) {
  ExpectSizeMismatch(CreateUcxTransport, (1 << 20) + 3, 1 << 20, true);
}

TEST(UcxTransportTest, DestroyedWithPendingRequestsFailsThemAndThePeer) {
  RunRanks(2, [&](RankContext& ctx) {
    std::vector<char> big(kLargeBytes);
    std::vector<char> small(16);
    if (ctx.rank == 1) {
      // A large send and a receive that never match, then the transport goes.
      auto send = ctx.t().channel(0).Send(big.data(), big.size(), 1);
      auto recv = ctx.t().channel(0).Recv(small.data(), small.size(), 2);
      ctx.transport.reset();
      for (auto* r : {&send, &recv}) {
        EXPECT_TRUE((*r)->IsCompleted());
        absl::Status status = WaitLong(**r);
        EXPECT_TRUE(absl::IsCancelled(status)) << status;
        EXPECT_TRUE(absl::StrContains(status.message(), "was destroyed")) << status;
      }
      ctx.barrier->Wait();
      return;
    }
    auto recv = ctx.t().channel(1).Recv(small.data(), small.size(), 3);  // never sent
    absl::Status status = recv->Wait(Deadline::After(absl::Seconds(60)));
    EXPECT_FALSE(status.ok());
    EXPECT_FALSE(absl::IsDeadlineExceeded(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 1")) << status;
    ctx.barrier->Wait();
  });
}

// ---- Loading UCX (Note [UCX loaded on demand])
// --------------------------------------------------- Each case runs in a fresh process (threadsafe
// death tests re-execute the binary), since the library is loaded once per process.

bool UcpMapped() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  char line[4096];
  bool found = false;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    if (std::strstr(line, "libucp") != nullptr) found = true;
  }
  std::fclose(maps);
  return found;
}

// Exit codes of the child: 3 as expected, 4 libucp mapped before any UCX transport, 5 otherwise.
void CreateWorldOfOneAndExit(bool expect_ok) {
  if (UcpMapped()) std::_Exit(4);
  TransportOptions options;
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Transport>> t = CreateUcxTransport(options);
  std::fprintf(stderr, "status: %s\n", t.status().ToString().c_str());
  std::fflush(stderr);
  const bool ok = expect_ok ? t.ok() && UcpMapped() : absl::IsFailedPrecondition(t.status());
  std::_Exit(ok ? 3 : 5);
}

TEST(UcxLibraryDeathTest, LibucpIsLoadedOnlyWhenAUcxTransportIsCreated) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(CreateWorldOfOneAndExit(/*expect_ok=*/true), testing::ExitedWithCode(3), "OK");
}

TEST(UcxLibraryDeathTest, AMissingLibraryIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("PADDLE_UCX_LIBRARY", "/nonexistent/libucp.so.0", 1);
        CreateWorldOfOneAndExit(/*expect_ok=*/false);
      },
      testing::ExitedWithCode(3),
      "loading /nonexistent/libucp.so.0 failed: .*install libucx0.*PADDLE_TRANSPORT=tcp");
}

TEST(UcxTransportTest, GarbageAddressInTheStoreIsRejected) {
  TransportOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.store = std::make_shared<HashStore>();
  ASSERT_OK(options.store->Set("transport/ucx/1/0", "not an address"));
  absl::StatusOr<std::unique_ptr<Transport>> t = CreateUcxTransport(options);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(t.status())) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "store_prefix")) << t.status();
}

// Forwards to the job's store, except that the UCX secret it hands out is not the job's: the
// store of a rank that can reach the job's workers but lacks its secret (Note [UCX hello proof]).
class ImpostorStore final : public Store {
 public:
  explicit ImpostorStore(std::shared_ptr<Store> job) : job_(std::move(job)) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return job_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    return job_->Get(key, timeout);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    return job_->Add(key, delta);
  }
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override {
    if (absl::EndsWith(key, "/ucx/secret")) return std::string(64, 'a');
    return job_->CompareSet(key, expected, desired);
  }
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override {
    return job_->Wait(keys, timeout);
  }
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
    return job_->Check(keys);
  }
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override { return job_->DeleteKey(key); }
  absl::StatusOr<int64_t> NumKeys() override { return job_->NumKeys(); }
  std::string Describe() const override { return "impostor of " + job_->Describe(); }

 private:
  std::shared_ptr<Store> job_;
};

// A rank that publishes an address but cannot prove it holds the job's key is never connected:
// its hellos are dropped, and setup ends at the connect timeout naming it and why. The side that
// times out second may instead see the first one's endpoint close; it still says why.
TEST(UcxTransportTest, PeerWithoutTheJobSecretIsRefused) {
  auto store = std::make_shared<HashStore>();
  absl::StatusOr<std::unique_ptr<Transport>> results[2];
  std::thread impostor([&] {
    TransportOptions options;
    options.rank = 1;
    options.world_size = 2;
    options.store = std::make_shared<ImpostorStore>(store);
    options.connect_timeout = absl::Seconds(3);
    results[1] = CreateUcxTransport(options);
  });
  TransportOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.store = store;
  options.connect_timeout = absl::Seconds(3);
  results[0] = CreateUcxTransport(options);
  impostor.join();
  for (int rank : {0, 1}) {
    const absl::Status& status = results[rank].status();
    ASSERT_FALSE(status.ok()) << "rank " << rank << " connected to a peer without the secret";
    EXPECT_TRUE(absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status)) << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(),
        absl::StrCat("on the link to rank ", 1 - rank, " dropped a hello claiming rank ", 1 - rank,
                     " that does not prove membership of this job")))
        << status;
  }
}

// ---- Real processes ----------------------------------------------------------------------------

constexpr size_t kProcessMessageBytes = (4 << 20) + 7;

// One worker process ("exchange" or "until_failure", then ":" and the UCX_TLS to use).
int RunWorker(int port, int rank, int world, const std::string& mode_and_tls) {
  std::vector<std::string> parts = absl::StrSplit(mode_and_tls, ':');
  if (parts.size() > 1 && !parts[1].empty()) setenv("UCX_TLS", parts[1].c_str(), 1);
  return RunExchangeWorker(port, rank, world, parts[0], CreateUcxTransport, kProcessMessageBytes,
                           mode_and_tls);
}

class UcxTransportProcessTest : public testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Tls, UcxTransportProcessTest, testing::Values("tcp", ""),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("default") : info.param;
                         });

TEST_P(UcxTransportProcessTest, FourProcessesExchangeLargeMessages) {
  ExpectProcessesExchange(kWorkerFlag, absl::StrCat("exchange:", GetParam()));
}

TEST_P(UcxTransportProcessTest, KilledProcessFailsTheOthersNamingIt) {
  ExpectKilledProcessNamed(kWorkerFlag, absl::StrCat("until_failure:", GetParam()),
                           absl::Seconds(10),
                           [](const WorkerProcess&) { return std::string("peer rank 3 ("); });
}

// Note [UCX zero-copy over TCP]: a peer killed while zero-copy sends to it are in flight made
// UCX 1.13's tcp transport complete such a send twice and abort the survivor inside
// ucp_worker_progress (uct_iface.h: "Assertion `comp->count > 0' failed"), instead of failing its
// requests. Whether it happens depends on the moment of the kill (about one kill in four in a
// standalone reproduction), so two processes stream to each other and one is killed at a
// different moment each time, ten times over; the survivor must fail cleanly, naming its peer.
TEST(UcxTransportKillTest, PeerKilledAtAnyMomentNeverAbortsTheSurvivor) {
  constexpr int kKills = 10;
  for (int i = 0; i < kKills; ++i) {
    SCOPED_TRACE(absl::StrCat("kill ", i));
    std::unique_ptr<TcpStoreServer> server = StartLoopbackStoreServer();
    ASSERT_NE(server, nullptr);
    std::vector<WorkerProcess> workers =
        StartExchangeWorkers(kWorkerFlag, 2, server->port(), "flood:tcp");
    TcpStoreOptions options;
    options.host = "127.0.0.1";
    options.port = server->port();
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_OK((*store)->Wait({"round2/0", "round2/1"}, kLongWait));
    absl::SleepFor(absl::Milliseconds((i * 37) % 200));
    EXPECT_EQ(kill(workers[1].pid, SIGKILL), 0);
    WaitForWorkerProcesses(workers, absl::Seconds(60));
    const std::string output = workers[0].Output();
    EXPECT_EQ(workers[0].exit_code, 3) << output;
    EXPECT_TRUE(absl::StrContains(output, "WORKER_FAILED")) << output;
    EXPECT_TRUE(absl::StrContains(output, "peer rank 1")) << output;
    if (HasFailure()) break;
  }
}

// ---- Measurements (not a test) ------------------------------------------------------------------

// `--ucx_bench`: two ranks as threads of this process; 4 KiB ping-pong one-way latency (p50 of
// 2000 round trips) and 64 MiB one-way bandwidth (best of 5), under the UCX_TLS of the caller.
int RunBench() {
  constexpr size_t kSmall = 4096;
  constexpr size_t kBig = 64 << 20;
  RunRankThreads(2, CreateUcxTransport, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    std::vector<char> buf(kBig);
    std::vector<double> one_way_us;
    for (int i = 0; i < 2200; ++i) {
      absl::Time start = absl::Now();
      if (ctx.rank == 0) {
        auto r = ch.Recv(buf.data(), kSmall, 2);
        PADDLE_CHECK(WaitLong(*ch.Send(buf.data(), kSmall, 1)).ok());
        PADDLE_CHECK(WaitLong(*r).ok());
      } else {
        PADDLE_CHECK(WaitLong(*ch.Recv(buf.data(), kSmall, 1)).ok());
        PADDLE_CHECK(WaitLong(*ch.Send(buf.data(), kSmall, 2)).ok());
      }
      if (i >= 200) one_way_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start) / 2);
    }
    double best_gbs = 0;
    for (int i = 0; i < 6; ++i) {
      ctx.barrier->Wait();
      absl::Time start = absl::Now();
      if (ctx.rank == 0) {
        PADDLE_CHECK(WaitLong(*ch.Send(buf.data(), kBig, 3)).ok());
        PADDLE_CHECK(WaitLong(*ch.Recv(buf.data(), 1, 4)).ok());
      } else {
        PADDLE_CHECK(WaitLong(*ch.Recv(buf.data(), kBig, 3)).ok());
        PADDLE_CHECK(WaitLong(*ch.Send(buf.data(), 1, 4)).ok());
      }
      double gbs = kBig / absl::ToDoubleSeconds(absl::Now() - start) / 1e9;
      if (i > 0) best_gbs = std::max(best_gbs, gbs);
    }
    if (ctx.rank == 0) {
      std::sort(one_way_us.begin(), one_way_us.end());
      const char* tls = std::getenv("UCX_TLS");
      std::printf("UCX_TLS=%s: 4 KiB one-way p50 %.2f us, 64 MiB %.2f GB/s\n",
                  tls != nullptr ? tls : "(default)", one_way_us[one_way_us.size() / 2], best_gbs);
    }
  });
  return 0;
}

}  // namespace
}  // namespace paddle

// See the same suppressions in tcp_transport_test.cc: the system Abseil is uninstrumented.
int main(int argc, char** argv) {
  const int worker =
      paddle::MaybeRunExchangeWorker(argc, argv, paddle::kWorkerFlag, paddle::RunWorker);
  if (worker >= 0) return worker;
  if (argc == 2 && std::strcmp(argv[1], "--ucx_bench") == 0) return paddle::RunBench();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
