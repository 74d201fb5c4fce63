// The transport conformance suite and its checks; see transport_conformance.h.
#include "tests/collective/transport/transport_conformance.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/logging.h"

// ThreadSanitizer cannot see into the uninstrumented system Abseil (Note [Locks and
// ThreadSanitizer] in tcp_request.h): the stores used by the transport tests lock with its
// absl::Mutex, and an absl::Status shared between threads is freed after a reference count it
// cannot see. Those reports are false; everything else, the transports' own locking included, is
// checked. (Every transport test links this file.)
extern "C" const char* __tsan_default_suppressions() {
  return "race:paddle::HashStore::\n"
         "race:paddle::TcpStore::\n"
         "race:paddle::TcpStoreServer::\n"
         "race:absl::*Status::UnrefNonInlined\n";
}

namespace paddle {

namespace {

// Runs a body on every rank of a world the caller chose (RunRankThreads with its factory).
using RankRunner = std::function<void(const std::function<void(RankContext&)>& body)>;

// Every pair of the `world` ranks exchanges one message of every size in `sizes` each way,
// checked byte for byte. Round k sends to rank + k and receives from rank - k; odd rounds post the
// receives first (messages land in place), even rounds the sends first (messages arrive before
// their receive and are buffered or claimed mid-arrival). Everything of a round is posted before
// anything is waited for, so transports whose large sends wait for the receive pass too.
void ExpectEveryPairExchangesEverySize(int world, const std::vector<size_t>& sizes,
                                       const RankRunner& run) {
  for (int rank = 0; rank < world; ++rank) {
    for (size_t i = 0; i < sizes.size(); ++i) Payload(rank, i, sizes[i]);  // before the clock runs
  }
  run([&](RankContext& ctx) {
    std::vector<std::vector<char>> got(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) got[i].resize(sizes[i]);
    for (int k = 1; k < world; ++k) {
      Channel& to = ctx.t().channel((ctx.rank + k) % world);
      Channel& from = ctx.t().channel((ctx.rank - k + world) % world);
      std::vector<std::unique_ptr<TransportRequest>> requests;
      auto post_receives = [&] {
        for (size_t i = 0; i < sizes.size(); ++i) {
          requests.push_back(from.Recv(got[i].data(), sizes[i], k * 16 + i));
        }
      };
      auto post_sends = [&] {
        for (size_t i = 0; i < sizes.size(); ++i) {
          requests.push_back(to.Send(Payload(ctx.rank, i, sizes[i]).data(), sizes[i], k * 16 + i));
        }
      };
      if (k % 2 == 1) {
        post_receives();
        post_sends();
      } else {
        post_sends();
        post_receives();
      }
      for (auto& request : requests) ASSERT_OK(WaitLong(*request));
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(Mismatch(got[i], from.peer(), i), "") << "round " << k << " size " << sizes[i];
      }
    }
  });
}

// Rank 0 sends `messages` messages of one tag (sizes (i x 7919) mod `size_modulus`); rank 1
// posts half of its receives before they are sent and half after they arrived: all arrive in
// order, byte for byte. The sender waits for its sends only after both halves are posted, so
// transports whose large sends wait for the receive pass too.
void ExpectOneTagArrivesInOrder(const RankRunner& run, int messages, size_t size_modulus) {
  auto size = [size_modulus](int i) { return static_cast<size_t>(i * 7919) % size_modulus; };
  run([&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      ctx.barrier->Wait();  // the first half of the receives are posted
      std::vector<std::unique_ptr<TransportRequest>> sends;
      for (int i = 0; i < messages; ++i) {
        sends.push_back(ch.Send(Payload(0, i, size(i)).data(), size(i), 7));
      }
      ctx.barrier->Wait();
      for (auto& s : sends) ASSERT_OK(WaitLong(*s));
      return;
    }
    std::vector<std::vector<char>> got(messages);
    std::vector<std::unique_ptr<TransportRequest>> recvs;
    for (int i = 0; i < messages; ++i) {
      if (i == messages / 2) {
        ctx.barrier->Wait();  // let the sender go ...
        absl::SleepFor(absl::Milliseconds(20));
        ctx.barrier->Wait();  // ... so the rest arrive unexpected
      }
      got[i].resize(size(i));
      recvs.push_back(ch.Recv(got[i].data(), size(i), 7));
    }
    for (int i = 0; i < messages; ++i) {
      ASSERT_OK(WaitLong(*recvs[i]));
      ASSERT_EQ(Mismatch(got[i], 0, i), "") << "message " << i;
    }
  });
}

// Rank 0 sends 16 tags in order (sizes tag x `size_step` + 1); rank 1 posts the last tag's receive
// first and the others afterwards in reverse: each gets its own message.
void ExpectDifferentTagsMatchOutOfOrder(const RankRunner& run, size_t size_step) {
  constexpr int kTags = 16;
  auto size = [size_step](int tag) { return static_cast<size_t>(tag) * size_step + 1; };
  run([&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      ctx.barrier->Wait();
      std::vector<std::unique_ptr<TransportRequest>> sends;
      for (int tag = 0; tag < kTags; ++tag) {
        sends.push_back(ch.Send(Payload(0, tag, size(tag)).data(), size(tag), tag));
      }
      for (auto& s : sends) ASSERT_OK(WaitLong(*s));
      return;
    }
    std::vector<std::vector<char>> got(kTags);
    for (int tag = 0; tag < kTags; ++tag) got[tag].resize(size(tag));
    auto last = ch.Recv(got[kTags - 1].data(), size(kTags - 1), kTags - 1);
    ctx.barrier->Wait();
    for (int tag = kTags - 2; tag >= 0; --tag) {
      ASSERT_OK(WaitLong(*ch.Recv(got[tag].data(), size(tag), tag)));
      EXPECT_EQ(Mismatch(got[tag], 0, tag), "");
    }
    ASSERT_OK(WaitLong(*last));
    EXPECT_EQ(Mismatch(got[kTags - 1], 0, kTags - 1), "");
  });
}

// Rank 0 sends pairs with Channel::SendPair (a 48-byte first message, then sizes 0, 1, `size` and
// 3 x `size` under another tag); rank 1 posts each pair's second receive before its first, some
// pairs before they are sent and some after: every message matches its own tag, bytes intact.
void ExpectSendPairsMatchTheirTags(const RankRunner& run, size_t size) {
  const std::vector<size_t> sizes = {0, 1, size, 3 * size};
  const int pairs = static_cast<int>(sizes.size()) * 2;
  constexpr size_t kFirstBytes = 48;
  run([&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      std::vector<std::unique_ptr<TransportRequest>> sends;
      for (int i = 0; i < pairs; ++i) {
        if (i == pairs / 2) ctx.barrier->Wait();  // the first half was posted before it was sent
        const size_t bytes = sizes[i % sizes.size()];
        std::unique_ptr<TransportRequest> first;
        std::unique_ptr<TransportRequest> second;
        ch.SendPair(Payload(0, 2 * i, kFirstBytes).data(), kFirstBytes, 1000 + i,
                    Payload(0, 2 * i + 1, bytes).data(), bytes, 2000 + i, &first, &second);
        sends.push_back(std::move(first));
        sends.push_back(std::move(second));
      }
      for (auto& s : sends) ASSERT_OK(WaitLong(*s));
      return;
    }
    std::vector<std::vector<char>> got(2 * pairs);
    std::vector<std::unique_ptr<TransportRequest>> recvs(2 * pairs);
    for (int i = 0; i < pairs; ++i) {
      if (i == pairs / 2) {
        ctx.barrier->Wait();
        absl::SleepFor(absl::Milliseconds(20));  // the rest arrive before their receives
      }
      got[2 * i + 1].resize(sizes[i % sizes.size()]);
      recvs[2 * i + 1] = ch.Recv(got[2 * i + 1].data(), got[2 * i + 1].size(), 2000 + i);
      got[2 * i].resize(kFirstBytes);
      recvs[2 * i] = ch.Recv(got[2 * i].data(), kFirstBytes, 1000 + i);
    }
    for (int m = 0; m < 2 * pairs; ++m) {
      ASSERT_OK(WaitLong(*recvs[m]));
      ASSERT_EQ(Mismatch(got[m], 0, m), "") << "message " << m;
    }
  });
}

// Note [Spare unexpected-message buffers]: rounds of large messages that all arrive before their
// receives (rank 0 waits for its sends, then rank 1 posts), in sizes that fit, and do not fit,
// the buffers kept from the round before; every byte checked. Transports whose large sends wait
// for the receive cannot pass it.
void ExpectUnexpectedLargeMessagesReuseBuffers(const RankRunner& run) {
  const std::vector<std::vector<size_t>> rounds = {
      {(1 << 20) + 3, (1 << 20) + 3, 700 << 10},
      {(700 << 10) + 1, (1 << 20) + 3, (3 << 20) + 1},  // the first two fit spares, the last not
      {(3 << 20) + 1, 600 << 10, (1 << 20)},            // 600 KiB is too small for a 1 MiB spare
      {(1 << 20) + 3, (1 << 20) + 3, (1 << 20) + 3, (1 << 20) + 3, (1 << 20) + 3}};
  run([&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    int tag = 10;
    for (const std::vector<size_t>& sizes : rounds) {
      const int first = tag;
      if (ctx.rank == 0) {
        std::vector<std::unique_ptr<TransportRequest>> sends;
        std::vector<std::vector<char>> payloads;
        for (size_t bytes : sizes) payloads.push_back(Payload(0, tag++, bytes));
        for (size_t i = 0; i < sizes.size(); ++i) {
          sends.push_back(ch.Send(payloads[i].data(), sizes[i], static_cast<uint64_t>(first)));
        }
        for (auto& send : sends) ASSERT_OK(WaitLong(*send));  // all buffered by rank 1
        ctx.barrier->Wait();
      } else {
        ctx.barrier->Wait();  // every message of the round arrived before its receive
        for (size_t bytes : sizes) {
          std::vector<char> got(bytes);
          ASSERT_OK(WaitLong(*ch.Recv(got.data(), bytes, static_cast<uint64_t>(first))));
          EXPECT_EQ(Mismatch(got, 0, tag), "") << "message " << tag << ", " << bytes << " bytes";
          ++tag;
        }
      }
      ctx.barrier->Wait();
    }
  });
}

// Rank 0 of 2 posts a receive and waits 50 ms for it: kDeadlineExceeded naming the request
// ("recv #0 (tag 5, 100 bytes) from peer 1") and "rank 0/2", and the request stays pending; once
// rank 1 sends, it completes with the right bytes.
void ExpectWaitTimesOutAndTheRequestStaysPending(const RankRunner& run) {
  run([&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 1) {
      ctx.barrier->Wait();
      ASSERT_OK(WaitLong(*ch.Send(Payload(1, 5, 100).data(), 100, 5)));
      return;
    }
    std::vector<char> got(100);
    auto recv = ch.Recv(got.data(), 100, 5);
    const absl::Time start = absl::Now();
    absl::Status status = recv->Wait(Deadline::After(absl::Milliseconds(50)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "recv #0 (tag 5, 100 bytes) from peer 1"))
        << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "rank 0/2")) << status;
    EXPECT_FALSE(recv->IsCompleted());
    ctx.barrier->Wait();
    ASSERT_OK(WaitLong(*recv));
    EXPECT_EQ(Mismatch(got, 1, 5), "");
  });
}

// `factory` makes a world of one without a store, named `name`; rank 1 of one, and rank 0 of two
// without a store, are kInvalidArgument (the latter saying "store is null").
void ExpectWorldOfOneNeedsNoStoreAndRejectsBadRanks(const TransportFactory& factory,
                                                    const std::string& name) {
  TransportOptions options;
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Transport>> t = factory(options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), name);
  EXPECT_EQ((*t)->world_size(), 1);
  options.rank = 1;
  absl::StatusOr<std::unique_ptr<Transport>> bad = factory(options);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  options.rank = 0;
  options.world_size = 2;  // and no store
  bad = factory(options);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "store is null")) << bad.status();
}

// Rank 0 of 2 whose peer never comes fails within a 300 ms connect timeout with
// kDeadlineExceeded naming "rank 1 to publish" and "rank 0/2". `interface_name`, if set, is the
// options' interface.
void ExpectMissingPeerTimesOutNamingIt(const TransportFactory& factory,
                                       const std::string& interface_name) {
  TransportOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.store = std::make_shared<HashStore>();
  if (!interface_name.empty()) options.interface_name = interface_name;
  options.connect_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Transport>> t = factory(options);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(t.status())) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "rank 1 to publish")) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "rank 0/2")) << t.status();
}

}  // namespace

// ---- The suite ---------------------------------------------------------------------------------

namespace {

std::vector<std::unique_ptr<ScopedEnv>> SetEnv(const TransportConformanceParam& param) {
  std::vector<std::unique_ptr<ScopedEnv>> env;
  for (const auto& [name, value] : param.env) {
    env.push_back(std::make_unique<ScopedEnv>(name.c_str(), value.c_str()));
  }
  return env;
}

}  // namespace

std::string TransportConformanceParamName(
    const testing::TestParamInfo<TransportConformanceParam>& info) {
  return info.param.name;
}

std::string TransportWorldConformanceParamName(
    const testing::TestParamInfo<std::tuple<TransportConformanceParam, int>>& info) {
  return absl::StrCat(std::get<0>(info.param).name, "_", std::get<1>(info.param), "ranks");
}

void TransportConformanceTest::SetUp() { env_ = SetEnv(param()); }

void TransportConformanceTest::Run(int world, const std::function<void(RankContext&)>& body) {
  RunRankThreads(world, param().factory, body);
}

void TransportWorldConformanceTest::SetUp() { env_ = SetEnv(param()); }

void TransportWorldConformanceTest::Run(const std::function<void(RankContext&)>& body) {
  RunRankThreads(world(), param().factory, [&](RankContext& ctx) {
    EXPECT_EQ(ctx.t().name(), param().transport_name);
    body(ctx);
  });
}

// Transports that one binary does not build (UCX without its headers) leave a suite empty.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportWorldConformanceTest);

TEST_P(TransportWorldConformanceTest, PingPongWithEveryRank) {
  constexpr int kRounds = 40;
  const size_t bytes = param().ping_bytes;
  Run([&](RankContext& ctx) {
    for (int peer = 1; peer < ctx.world_size; ++peer) {
      if (ctx.rank != 0 && ctx.rank != peer) continue;
      Channel& ch = ctx.t().channel(ctx.rank == 0 ? peer : 0);
      for (int i = 0; i < kRounds; ++i) {
        std::vector<char> got(bytes);
        if (ctx.rank == 0) {
          auto send = ch.Send(Payload(0, i, bytes).data(), bytes, i);
          if (param().ping_is_eager) EXPECT_TRUE(send->IsCompleted());  // done inside Send()
          ASSERT_OK(WaitLong(*send));
          ASSERT_OK(WaitLong(*ch.Recv(got.data(), bytes, i)));
          ASSERT_EQ(Mismatch(got, peer, i), "");
        } else {
          ASSERT_OK(WaitLong(*ch.Recv(got.data(), bytes, i)));
          ASSERT_EQ(Mismatch(got, 0, i), "");
          ASSERT_OK(WaitLong(*ch.Send(Payload(peer, i, bytes).data(), bytes, i)));
        }
      }
    }
  });
}

TEST_P(TransportWorldConformanceTest, EveryPairExchangesEverySizeExactly) {
  ExpectEveryPairExchangesEverySize(world(), param().exchange_sizes(world()),
                                    [&](const auto& body) { Run(body); });
}

TEST_P(TransportConformanceTest, MessagesWithOneTagArriveInOrder) {
  ExpectOneTagArrivesInOrder([&](const auto& body) { Run(2, body); }, param().one_tag_messages,
                             param().one_tag_size_modulus);
}

TEST_P(TransportConformanceTest, DifferentTagsMatchOutOfOrder) {
  ExpectDifferentTagsMatchOutOfOrder([&](const auto& body) { Run(2, body); },
                                     param().tag_size_step);
}

TEST_P(TransportConformanceTest, SendPairsMatchTheirTags) {
  ExpectSendPairsMatchTheirTags([&](const auto& body) { Run(2, body); }, param().pair_bytes);
}

TEST_P(TransportConformanceTest, UnexpectedLargeMessagesReuseBuffers) {
  if (!param().spares_unexpected_buffers) {
    GTEST_SKIP() << "this transport keeps no spare buffers for unexpected messages (UCX: its own "
                    "library buffers them); the test runs for tcp and shm";
  }
  ExpectUnexpectedLargeMessagesReuseBuffers([&](const auto& body) { Run(2, body); });
}

TEST_P(TransportConformanceTest, AbortWakesBlockedWaitHereAndAtThePeer) {
  Run(2, [&](RankContext& ctx) {
    std::vector<char> buf(64);
    auto recv = ctx.t().channel(1 - ctx.rank).Recv(buf.data(), buf.size(), 1);  // never sent
    const absl::Time start = absl::Now();
    if (ctx.rank == 0) {
      std::thread aborter([&] {
        absl::SleepFor(absl::Milliseconds(100));
        ctx.t().Abort(absl::AbortedError("test abort from rank 0"));
        ctx.t().Abort(absl::InternalError("a second cause, ignored"));
      });
      absl::Status status = recv->Wait(Deadline::After(absl::Seconds(60)));
      aborter.join();
      EXPECT_TRUE(absl::IsAborted(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "test abort from rank 0")) << status;
      auto later = ctx.t().channel(1).Send(buf.data(), buf.size(), 2);
      EXPECT_TRUE(later->IsCompleted());
      EXPECT_TRUE(absl::StrContains(WaitLong(*later).message(), "test abort from rank 0"));
    } else {
      // The peer learns why, before the link closes.
      absl::Status status = recv->Wait(Deadline::After(absl::Seconds(60)));
      EXPECT_FALSE(status.ok());
      EXPECT_FALSE(absl::IsDeadlineExceeded(status)) << status;
      if (param().peer_sees_aborted_code) EXPECT_TRUE(absl::IsAborted(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), param().aborted_peer_named)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "test abort from rank 0")) << status;
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  });
}

TEST_P(TransportConformanceTest, WaitTimesOutAndTheRequestStaysPending) {
  ExpectWaitTimesOutAndTheRequestStaysPending([&](const auto& body) { Run(2, body); });
}

TEST_P(TransportConformanceTest, SizeMismatchWithPostedReceive) {
  ExpectSizeMismatch(param().factory, 300, 100, true);
}

TEST_P(TransportConformanceTest, SizeMismatchWithUnexpectedMessage) {
  ExpectSizeMismatch(param().factory, 300, 100, false);
}

TEST_P(TransportConformanceTest, WorldOfOneNeedsNoStoreAndRejectsBadRanks) {
  ExpectWorldOfOneNeedsNoStoreAndRejectsBadRanks(param().factory, param().transport_name);
}

TEST_P(TransportConformanceTest, MissingPeerTimesOutNamingIt) {
  ExpectMissingPeerTimesOutNamingIt(param().factory, param().interface_name);
}

void ExpectSizeMismatch(const TransportFactory& factory, size_t send_bytes, size_t recv_bytes,
                        bool receive_first) {
  RunRankThreads(2, factory, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    std::vector<char> buf(std::max(send_bytes, recv_bytes));
    if (ctx.rank == 0) {
      if (receive_first) ctx.barrier->Wait();
      auto send = ch.Send(buf.data(), send_bytes, 3);
      if (!receive_first) ctx.barrier->Wait();
      // The receiver's abort carries the mismatch here too.
      absl::Status status = WaitLong(*ch.Recv(buf.data(), 1, 99));
      EXPECT_TRUE(absl::StrContains(status.message(), "size mismatch")) << status;
      // Sent, or failed by that abort when the transport waits for the receiver.
      (void)WaitLong(*send);
      return;
    }
    std::unique_ptr<TransportRequest> recv;
    if (receive_first) {
      recv = ch.Recv(buf.data(), recv_bytes, 3);
      ctx.barrier->Wait();
    } else {
      ctx.barrier->Wait();
      absl::SleepFor(absl::Milliseconds(50));  // arrived or arriving: both paths must catch it
      recv = ch.Recv(buf.data(), recv_bytes, 3);
    }
    absl::Status status = WaitLong(*recv);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    for (const std::string& part :
         {std::string("size mismatch on tag 3"), absl::StrCat("expects ", recv_bytes, " bytes"),
          std::string("peer 0"), absl::StrCat("sent ", send_bytes, " bytes"),
          std::string("rank 1/2")}) {
      EXPECT_TRUE(absl::StrContains(status.message(), part)) << part << " not in " << status;
    }
  });
}

// ---- Worker processes --------------------------------------------------------------------------

int MaybeRunExchangeWorker(int argc, char** argv, const char* flag,
                           const ExchangeWorkerMain& worker) {
  if (argc != 6 || std::strcmp(argv[1], flag) != 0) return -1;
  int port = 0, rank = 0, world = 0;
  if (!absl::SimpleAtoi(argv[2], &port) || !absl::SimpleAtoi(argv[3], &rank) ||
      !absl::SimpleAtoi(argv[4], &world)) {
    return 2;
  }
  const int code = worker(port, rank, world, argv[5]);
  std::fflush(stdout);
  return code;
}

std::vector<WorkerProcess> ExpectProcessesExchange(const char* flag, const std::string& mode) {
  std::unique_ptr<TcpStoreServer> server = StartLoopbackStoreServer();
  if (server == nullptr) return {};
  std::vector<WorkerProcess> workers = StartExchangeWorkers(flag, 4, server->port(), mode);
  WaitForWorkerProcesses(workers, absl::Seconds(240));
  for (const WorkerProcess& w : workers) {
    EXPECT_EQ(w.exit_code, 0) << w.Output();
    EXPECT_TRUE(absl::StrContains(w.Output(), "WORKER_OK")) << w.Output();
  }
  return workers;
}

std::vector<WorkerProcess> ExpectKilledProcessNamed(
    const char* flag, const std::string& mode, absl::Duration limit,
    const std::function<std::string(const WorkerProcess& victim)>& culprit) {
  std::unique_ptr<TcpStoreServer> server = StartLoopbackStoreServer();
  if (server == nullptr) return {};
  std::vector<WorkerProcess> workers = StartExchangeWorkers(flag, 4, server->port(), mode);
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = server->port();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return workers;
  absl::Status ready = (*store)->Wait({"round2/0", "round2/1", "round2/2", "round2/3"}, kLongWait);
  EXPECT_TRUE(ready.ok()) << ready;
  // Everyone is streaming large messages to everyone: rank 3 dies mid-transfer.
  const absl::Time killed = absl::Now();
  EXPECT_EQ(kill(workers[3].pid, SIGKILL), 0);
  WaitForWorkerProcesses(workers, absl::Seconds(120));
  EXPECT_EQ(workers[3].exit_code, 128 + SIGKILL);
  const std::string name = culprit(workers[3]);
  for (int rank = 0; rank < 3; ++rank) {
    const WorkerProcess& w = workers[rank];
    const std::string output = w.Output();
    EXPECT_EQ(w.exit_code, 3) << output;
    EXPECT_LT(w.exited - killed, limit) << output;
    EXPECT_TRUE(absl::StrContains(output, "WORKER_FAILED")) << output;
    EXPECT_TRUE(absl::StrContains(output, name)) << name << " not in " << output;
  }
  return workers;
}

std::unique_ptr<TcpStoreServer> StartLoopbackStoreServer() {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::vector<WorkerProcess> StartExchangeWorkers(const char* flag, int world, int port,
                                                const std::string& mode) {
  std::vector<std::vector<std::string>> args;
  for (int rank = 0; rank < world; ++rank) {
    args.push_back({flag, absl::StrCat(port), absl::StrCat(rank), absl::StrCat(world), mode});
  }
  return StartWorkerProcesses(args);
}

int RunExchangeWorker(int port, int rank, int world, const std::string& mode,
                      const TransportFactory& factory, size_t bytes,
                      const std::string& store_prefix) {
  SetLogRank(rank, world);
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = port;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
  if (!store.ok()) {
    std::printf("WORKER_ERROR store: %s\n", store.status().ToString().c_str());
    return 2;
  }
  std::shared_ptr<Store> shared(std::move(*store));
  TransportOptions options;
  options.rank = rank;
  options.world_size = world;
  options.store = shared;
  options.store_prefix = store_prefix;
  options.interface_name = "127.0.0.1";
  options.connect_timeout = kLongWait;
  absl::StatusOr<std::unique_ptr<Transport>> transport = factory(options);
  if (!transport.ok()) {
    std::printf("WORKER_ERROR transport: %s\n", transport.status().ToString().c_str());
    return 2;
  }
  Transport& t = **transport;
  const bool until_failure = mode == "until_failure" || mode == "flood";
  const int depth = mode == "flood" ? 4 : 1;  // messages each way per peer and round
  std::vector<std::vector<char>> got(world * depth, std::vector<char>(bytes));
  const std::vector<char> out[2] = {Payload(rank, 0, bytes), Payload(rank, 1, bytes)};
  const int rounds = until_failure ? 100000 : 3;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<TransportRequest>> requests;
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      for (int k = 0; k < depth; ++k) {
        requests.push_back(t.channel(peer).Recv(got[peer * depth + k].data(), bytes, round));
        requests.push_back(t.channel(peer).Send(out[round % 2].data(), bytes, round));
      }
    }
    for (auto& request : requests) {
      absl::Status status = request->Wait(Deadline::After(absl::Seconds(60)));
      if (!status.ok()) {
        std::printf("WORKER_FAILED rank=%d round=%d: %s\n", rank, round, status.ToString().c_str());
        return 3;
      }
    }
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      for (int k = 0; k < depth; ++k) {
        std::string bad = Mismatch(got[peer * depth + k], peer, round % 2);
        if (!bad.empty()) {
          std::printf("WORKER_ERROR %s\n", bad.c_str());
          return 4;
        }
      }
    }
    if (round == 2 && until_failure) {
      absl::Status s = shared->Set(absl::StrCat("round2/", rank), "1");
      if (!s.ok()) return 5;
    }
  }
  absl::Status done = StoreBarrier(*shared, "done", rank, world, kLongWait);
  std::printf("WORKER_OK rank=%d %s\n", rank, done.ToString().c_str());
  return done.ok() ? 0 : 6;
}

}  // namespace paddle
