// Tests of the TCP transport: ranks as threads over a HashStore for the data path, matching and
// failure rules, and real processes over a TcpStoreServer for a large exchange and a rank killed
// with SIGKILL. Every payload is made from (seed, sender rank, message index) and checked byte for
// byte. The test binary re-executes itself as the worker processes (see main()).
#include "paddle/collective/transport/tcp/tcp_transport.h"

#include <signal.h>
#include <sys/socket.h>

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
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/collective/rendezvous/store_barrier.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/collective/transport/tcp/tcp_socket.h"
#include "paddle/collective/transport/tcp/tcp_tuning.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"
#include "paddle/core/logging.h"
#include "tests/collective/transport/transport_conformance.h"
#include "tests/collective/transport/transport_test_harness.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

constexpr char kWorkerFlag[] = "--tcp_transport_worker";
constexpr absl::Duration kLong = kLongWait;

void RunRanks(int world, const std::function<void(RankContext&)>& body,
              const RankThreadsOptions& options = {}) {
  RunRankThreads(world, CreateTcpTransport, body, options);
}

// ---- Addresses ---------------------------------------------------------------------------------

TEST(SocketAddressTest, ParsesAndPrintsIpv4AndIpv6) {
  absl::StatusOr<SocketAddress> v4 = SocketAddress::Parse("10.1.2.3:4567");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->ToString(), "10.1.2.3:4567");
  EXPECT_EQ(v4->port(), 4567);
  absl::StatusOr<SocketAddress> v6 = SocketAddress::Parse("[::1]:80");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(v6->ToString(), "[::1]:80");
  EXPECT_TRUE(v6->IsLoopback());
  EXPECT_FALSE(SocketAddress::Parse("::1:80").ok());  // IPv6 needs brackets
  EXPECT_FALSE(SocketAddress::Parse("10.1.2.3").ok());
  EXPECT_FALSE(SocketAddress::Parse("10.1.2.3:70000").ok());
}

TEST(SocketAddressTest, SelectsInterfaceLiteralOrNamesTheAvailableOnes) {
  absl::StatusOr<SocketAddress> lo = SelectListenAddress("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->Host(), "127.0.0.1");
  absl::StatusOr<SocketAddress> literal = SelectListenAddress("127.0.0.1");
  ASSERT_TRUE(literal.ok()) << literal.status();
  EXPECT_EQ(literal->Host(), "127.0.0.1");
  absl::StatusOr<SocketAddress> missing = SelectListenAddress("nosuchif9");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "nosuchif9")) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "lo (127.0.0.1")) << missing.status();
  // With no name, PADDLE_SOCKET_IFNAME decides.
  absl::StatusOr<SocketAddress> from_env = [] {
    ScopedEnv ifname("PADDLE_SOCKET_IFNAME", "nosuchif8");
    return SelectListenAddress("");
  }();
  ASSERT_FALSE(from_env.ok());
  EXPECT_TRUE(absl::StrContains(from_env.status().message(), "PADDLE_SOCKET_IFNAME"));
  // Otherwise some address of this host that can be bound.
  absl::StatusOr<SocketAddress> fallback = SelectListenAddress("");
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_TRUE(TcpSocket::Listen(*fallback, 1).ok());
}

// ---- Tuning ------------------------------------------------------------------------------------

TEST(TcpTuningTest, AutomaticSpinOnlyWhenTheRanksOnThisHostFitItsCpus) {
  const std::vector<std::string> two_local = {"127.0.0.1:4000", "127.0.0.1:4001"};
  EXPECT_EQ(AutomaticWaitSpin(two_local, 0, 2), kAutoWaitSpin);
  EXPECT_EQ(AutomaticWaitSpin(two_local, 1, 1), absl::ZeroDuration());
  // Three ranks on a two-CPU host: a spinning rank would hold the core its peer needs.
  const std::vector<std::string> three_local = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
  EXPECT_EQ(AutomaticWaitSpin(three_local, 2, 2), absl::ZeroDuration());
  EXPECT_EQ(AutomaticWaitSpin(three_local, 2, 3), kAutoWaitSpin);
  // Only ranks that published this rank's host count, whatever their ports; IPv6 included.
  const std::vector<std::string> spread = {"10.0.0.1:5", "10.0.0.2:5",  "[fd00::1]:5",
                                           "10.0.0.1:6", "[fd00::1]:7", "[fd00::1]:8"};
  EXPECT_EQ(AutomaticWaitSpin(spread, 0, 2), kAutoWaitSpin);         // 2 on 10.0.0.1
  EXPECT_EQ(AutomaticWaitSpin(spread, 1, 1), kAutoWaitSpin);         // 1 on 10.0.0.2
  EXPECT_EQ(AutomaticWaitSpin(spread, 2, 2), absl::ZeroDuration());  // 3 on fd00::1
  EXPECT_EQ(AutomaticWaitSpin(spread, 4, 3), kAutoWaitSpin);
}

TEST(TcpTuningTest, EnvironmentOverrides) {
  ScopedEnv spin("PADDLE_TCP_WAIT_SPIN_US", "250");
  ScopedEnv poll("PADDLE_TCP_BUSY_POLL_US", " 3 ");
  ScopedEnv reads("PADDLE_TCP_WAITER_READS", "0");
  ScopedEnv buffer("PADDLE_SOCKET_BUFFER_BYTES", "");
  absl::StatusOr<TcpTuning> t = TuningFromEnv();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->wait_spin_auto);
  EXPECT_EQ(t->wait_spin, absl::Microseconds(250));
  EXPECT_EQ(t->busy_poll, absl::Microseconds(3));
  EXPECT_FALSE(t->waiter_drives);
  EXPECT_EQ(t->socket_buffer_bytes, 0);  // empty is unset
  {
    ScopedEnv unset("PADDLE_TCP_WAIT_SPIN_US", nullptr);
    EXPECT_TRUE(TuningFromEnv()->wait_spin_auto);
  }
  ScopedEnv zero("PADDLE_TCP_WAIT_SPIN_US", "0");
  t = TuningFromEnv();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->wait_spin_auto);  // an explicit 0 turns the automatic spin off
  EXPECT_EQ(t->wait_spin, absl::ZeroDuration());
  EXPECT_GE(UsableCpus(), 1);
}

// Note [Environment settings]: a malformed value is an error naming it, never the default.
TEST(TcpTuningTest, MalformedValuesAreErrorsNamingTheVariable) {
  const struct {
    const char* name;
    const char* value;
  } cases[] = {
      {"PADDLE_TCP_BUSY_POLL_US", "-3"},      {"PADDLE_TCP_WAIT_SPIN_US", "10us"},
      {"PADDLE_TCP_WAIT_SPIN_US", "nan"},     {"PADDLE_TCP_WAITER_READS", "2"},
      {"PADDLE_SOCKET_BUFFER_BYTES", "lots"}, {"PADDLE_SOCKET_BUFFER_BYTES", "4294967296"}};
  for (const auto& c : cases) {
    ScopedEnv bad(c.name, c.value);
    absl::StatusOr<TcpTuning> t = TuningFromEnv();
    ASSERT_FALSE(t.ok()) << c.name << "=" << c.value;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(t.status().message(), absl::StrCat(c.name, "=\"", c.value, "\"")))
        << t.status();
  }
  // Creating a transport surfaces the error instead of running with the default.
  ScopedEnv bad("PADDLE_TCP_BUSY_POLL_US", "fast");
  TransportOptions options;
  options.rank = 0;
  options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Transport>> transport = CreateTcpTransport(options);
  ASSERT_FALSE(transport.ok());
  EXPECT_TRUE(absl::StrContains(transport.status().message(), "PADDLE_TCP_BUSY_POLL_US=\"fast\""))
      << transport.status();
}

// ---- The conformance suite (transport_conformance.h) -------------------------------------------

TransportConformanceParam TcpParam() {
  TransportConformanceParam param("tcp", CreateTcpTransport);
  param.interface_name = "127.0.0.1";
  param.exchange_sizes = [](int) {
    return std::vector<size_t>{0, 1, 4095, (1 << 20) + 3, kLargeBytes};
  };
  return param;
}

INSTANTIATE_TRANSPORT_CONFORMANCE(Tcp, TcpParam(), testing::Range(2, 9));

// ---- Matching ----------------------------------------------------------------------------------

TEST(TcpTransportTest, ReceivePostedBeforeSendAndAfterArrival) {
  const size_t big = (1 << 20) + 3;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      ctx.barrier->Wait();
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 1, big).data(), big, 1)));
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 2, big).data(), big, 2)));
      ASSERT_OK(WaitLong(*ch.Send(Payload(0, 3, 8).data(), 8, 3)));
      return;
    }
    // Posted before the send: read straight into this buffer.
    std::vector<char> before(big);
    auto first = ch.Recv(before.data(), big, 1);
    ctx.barrier->Wait();
    ASSERT_OK(WaitLong(*first));
    EXPECT_EQ(Mismatch(before, 0, 1), "");
    // Tag 3 was sent after tag 2, so once it is here tag 2 has arrived in full, unexpected: its
    // receive completes inside Recv() by copying.
    std::vector<char> marker(8);
    ASSERT_OK(WaitLong(*ch.Recv(marker.data(), 8, 3)));
    std::vector<char> after(big);
    auto second = ch.Recv(after.data(), big, 2);
    EXPECT_TRUE(second->IsCompleted());
    ASSERT_OK(WaitLong(*second));
    EXPECT_EQ(Mismatch(after, 0, 2), "");
  });
}

TEST(TcpTransportTest, ReceivePostedWhileLargeMessageArrives) {
  // The receive lands while the message streams in: it claims the partial buffer. The timing
  // varies from run to run, which is the point; the bytes must be right every time.
  for (int i = 0; i < 6; ++i) Payload(0, 10 + i, kLargeBytes);
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    std::vector<char> got(ctx.rank == 1 ? kLargeBytes : 0);
    for (int i = 0; i < 6; ++i) {
      ctx.barrier->Wait();
      if (ctx.rank == 0) {
        ASSERT_OK(WaitLong(*ch.Send(Payload(0, 10 + i, kLargeBytes).data(), kLargeBytes, i)));
      } else {
        absl::SleepFor(absl::Milliseconds(i));
        ASSERT_OK(WaitLong(*ch.Recv(got.data(), kLargeBytes, i)));
        ASSERT_EQ(Mismatch(got, 0, 10 + i), "");
      }
    }
  });
}

// Note [No read-ahead for waiters]: a driver stops reading once the receive it waits for is
// complete, so the message behind it (here, part of the same read when small) stays in the staging
// buffer or the kernel until its receive is posted. Nobody waits for that receive: the loop must
// still deliver it once it takes the parked socket back.
TEST(TcpTransportTest, MessageBehindTheWaitedOneArrivesWithoutAWait) {
  for (size_t second_bytes : {size_t{8}, size_t{100} << 10}) {
    RunRanks(2, [&](RankContext& ctx) {
      Channel& ch = ctx.t().channel(1 - ctx.rank);
      // A first exchange that is waited for parks the sockets (Note [Waiter drives]).
      char ping = 0;
      if (ctx.rank == 0) {
        ASSERT_OK(WaitLong(*ch.Send(&ping, 1, 9)));
        ASSERT_OK(WaitLong(*ch.Send(Payload(0, 1, 8).data(), 8, 1)));
        ASSERT_OK(WaitLong(*ch.Send(Payload(0, 2, second_bytes).data(), second_bytes, 2)));
        ctx.barrier->Wait();
        return;
      }
      ASSERT_OK(WaitLong(*ch.Recv(&ping, 1, 9)));
      std::vector<char> first(8);
      ASSERT_OK(WaitLong(*ch.Recv(first.data(), 8, 1)));
      EXPECT_EQ(Mismatch(first, 0, 1), "");
      ctx.barrier->Wait();
      std::vector<char> second(second_bytes);
      auto request = ch.Recv(second.data(), second_bytes, 2);
      const Deadline deadline = Deadline::After(kLong);
      while (!request->IsCompleted() && !deadline.Expired()) absl::SleepFor(absl::Milliseconds(1));
      ASSERT_TRUE(request->IsCompleted()) << second_bytes << " bytes";
      ASSERT_OK(WaitLong(*request));
      EXPECT_EQ(Mismatch(second, 0, 2), "");
    });
  }
}

// Note [Waiter drives]: small sends queued behind a large one that filled the socket are written
// by whichever thread gets there (the driver, polling for room, or the loop once it has taken the
// channel back), and the receiver, posting late, gets every byte in order.
TEST(TcpTransportTest, SmallSendsQueuedBehindAFullSocketComplete) {
  const size_t big = kLargeBytes;
  constexpr int kSmall = 64;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    if (ctx.rank == 0) {
      std::vector<char> large = Payload(0, 1000, big);
      std::vector<std::vector<char>> small;
      for (int i = 0; i < kSmall; ++i) small.push_back(Payload(0, i, 100 + i));
      auto first = ch.Send(large.data(), big, 1);
      std::vector<std::unique_ptr<TransportRequest>> sends;
      for (int i = 0; i < kSmall; ++i) sends.push_back(ch.Send(small[i].data(), 100 + i, 2));
      ctx.barrier->Wait();  // the receiver starts reading only now
      // Waited for from the last: its waiter drives every write ahead of it.
      for (int i = kSmall - 1; i >= 0; --i) {
        absl::Status status = WaitLong(*sends[i]);
        ASSERT_TRUE(status.ok()) << "small send " << i << ": " << status;
      }
      ASSERT_OK(WaitLong(*first));
      ctx.barrier->Wait();
      return;
    }
    ctx.barrier->Wait();
    absl::SleepFor(absl::Milliseconds(50));  // let the sender block on a full socket
    std::vector<char> large(big);
    ASSERT_OK(WaitLong(*ch.Recv(large.data(), big, 1)));
    EXPECT_EQ(Mismatch(large, 0, 1000), "");
    for (int i = 0; i < kSmall; ++i) {
      std::vector<char> got(100 + i);
      ASSERT_OK(WaitLong(*ch.Recv(got.data(), got.size(), 2)));
      EXPECT_EQ(Mismatch(got, 0, i), "") << "small message " << i;
    }
    ctx.barrier->Wait();
  });
}

// Note [Waiter drives] in tcp_progress.h: a driver parks the channel (the loop stops watching
// it) and leaves it parked. A large send queued after that, which nobody waits for, must still go
// out: the loop takes the channel back once no thread has driven for a while and writes the rest.
// Rank 0 only polls IsCompleted(), which moves no data, so the loop alone can finish the send.
TEST(TcpTransportTest, LargeSendNobodyWaitsForIsFinishedByTheLoop) {
  const size_t big = kLargeBytes;
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    std::vector<char> small(64);
    if (ctx.rank == 0) {
      ASSERT_OK(WaitLong(*ch.Recv(small.data(), small.size(), 1)));  // a driven wait: parks
      std::vector<char> large = Payload(0, 2, big);
      auto send = ch.Send(large.data(), big, 2);  // fills the socket: the rest is queued
      ctx.barrier->Wait();
      const Deadline deadline = Deadline::After(kLong);
      while (!send->IsCompleted() && !deadline.Expired()) absl::SleepFor(absl::Milliseconds(1));
      ASSERT_TRUE(send->IsCompleted()) << "the loop never finished a send nobody waited for";
      ASSERT_OK(WaitLong(*send));
      return;
    }
    std::vector<char> out = Payload(1, 1, small.size());
    ASSERT_OK(WaitLong(*ch.Send(out.data(), out.size(), 1)));
    ctx.barrier->Wait();
    absl::SleepFor(absl::Milliseconds(20));
    std::vector<char> large(big);
    ASSERT_OK(WaitLong(*ch.Recv(large.data(), big, 2)));
    EXPECT_EQ(Mismatch(large, 0, 2), "");
  });
}

// Note [Waiter drives]: a driver moves every channel's data, not only its own op's. Rank 0 waits
// for a message from rank 2 that rank 2 sends only after hearing from rank 1, which speaks only
// once it has all of rank 0's large message; rank 0 never waits for that send. While rank 0
// drives, the loop keeps away from its sockets, so only its driver can write the large message:
// a driver serving only the channel it waits on would leave the three ranks waiting on each
// other until the deadline.
TEST(TcpTransportTest, DriverWritesEveryChannelWhileWaitingOnOne) {
  const size_t big = kLargeBytes;
  RunRanks(3, [&](RankContext& ctx) {
    std::vector<char> small(64);
    if (ctx.rank == 0) {
      std::vector<char> large = Payload(0, 1, big);
      auto send = ctx.t().channel(1).Send(large.data(), big, 1);  // fills the socket
      ASSERT_OK(WaitLong(*ctx.t().channel(2).Recv(small.data(), small.size(), 3)));
      EXPECT_EQ(Mismatch(small, 2, 3), "");
      ASSERT_OK(WaitLong(*send));
    } else if (ctx.rank == 1) {
      std::vector<char> large(big);
      ASSERT_OK(WaitLong(*ctx.t().channel(0).Recv(large.data(), big, 1)));
      EXPECT_EQ(Mismatch(large, 0, 1), "");
      std::vector<char> out = Payload(1, 2, small.size());
      ASSERT_OK(WaitLong(*ctx.t().channel(2).Send(out.data(), out.size(), 2)));
    } else {
      ASSERT_OK(WaitLong(*ctx.t().channel(1).Recv(small.data(), small.size(), 2)));
      EXPECT_EQ(Mismatch(small, 1, 2), "");
      std::vector<char> out = Payload(2, 3, small.size());
      ASSERT_OK(WaitLong(*ctx.t().channel(0).Send(out.data(), out.size(), 3)));
    }
    ctx.barrier->Wait();
  });
}

// Note [Waiter drives]: per rank, one thread streams sends and waits for each while another
// receives and waits, both ways over one channel at once, with a few large messages mixed in so
// sockets fill up: the waiters of both threads take turns driving the transport (one drives, the
// other naps on its op and tries again). Every byte is checked; a lost output edge or a waiter
// left behind would hang (and time out here).
TEST(TcpTransportTest, ConcurrentSmallSendsAndReceivesOnOneChannel) {
  constexpr int kMessages = 400;
  auto size = [](int i) -> size_t { return i % 50 == 49 ? (1 << 20) + i : 1 + (i * 37) % 9000; };
  RunRanks(2, [&](RankContext& ctx) {
    Channel& ch = ctx.t().channel(1 - ctx.rank);
    const int peer = 1 - ctx.rank;
    std::thread sender([&] {
      for (int i = 0; i < kMessages; ++i) {
        std::vector<char> out = Payload(ctx.rank, i, size(i));
        absl::Status status = WaitLong(*ch.Send(out.data(), out.size(), 5));
        ASSERT_TRUE(status.ok()) << "send " << i << ": " << status;
      }
    });
    for (int i = 0; i < kMessages; ++i) {
      std::vector<char> got(size(i));
      absl::Status status = WaitLong(*ch.Recv(got.data(), got.size(), 5));
      EXPECT_TRUE(status.ok()) << "recv " << i << ": " << status;
      EXPECT_EQ(Mismatch(got, peer, i), "") << "message " << i;
      if (testing::Test::HasFailure()) break;  // joins the sender below either way
    }
    sender.join();
  });
}

TEST(TcpTransportTest, Ipv6Loopback) {
  if (!SocketAddress::FromIp("::1", 0).ok() ||
      !TcpSocket::Listen(*SocketAddress::FromIp("::1", 0), 1).ok()) {
    GTEST_SKIP() << "no IPv6 loopback (::1) on this host; it runs wherever ::1 exists, such as the "
                    "CI machine";
  }
  const size_t bytes = (1 << 20) + 3;
  RankThreadsOptions job;
  job.interface_name = "::1";
  RunRanks(
      3,
      [&](RankContext& ctx) {
        std::vector<std::unique_ptr<TransportRequest>> requests;
        std::vector<std::vector<char>> got(3, std::vector<char>(bytes));
        for (int peer = 0; peer < 3; ++peer) {
          if (peer == ctx.rank) continue;
          Channel& ch = ctx.t().channel(peer);
          EXPECT_TRUE(absl::StartsWith(ch.peer_address(), "[::1]:")) << ch.peer_address();
          requests.push_back(ch.Recv(got[peer].data(), bytes, 0));
          requests.push_back(ch.Send(Payload(ctx.rank, 0, bytes).data(), bytes, 0));
        }
        for (auto& r : requests) ASSERT_OK(WaitLong(*r));
        for (int peer = 0; peer < 3; ++peer) {
          if (peer == ctx.rank) continue;
          EXPECT_EQ(Mismatch(got[peer], peer, 0), "");
        }
      },
      job);
}

// ---- Failures ----------------------------------------------------------------------------------

TEST(TcpTransportTest, DestroyedPeerFailsEveryPendingRequestNamingIt) {
  const size_t big = kLargeBytes;
  RunRanks(3, [&](RankContext& ctx) {
    std::vector<char> got(big);
    std::vector<char> small(16);
    if (ctx.rank == 2) {
      ctx.barrier->Wait();  // the others have posted their receives
      auto send = ctx.t().channel(0).Send(Payload(2, 0, big).data(), big, 9);
      // A receive nobody will satisfy: the transport is destroyed with work pending, which is a
      // failure for its peers even if the send above happens to have gone out in full (Note
      // [Graceful close]: only an idle transport leaves cleanly).
      auto never = ctx.t().channel(1).Recv(small.data(), 16, 99);
      ctx.transport.reset();  // mid-transfer
      EXPECT_FALSE(WaitLong(*never).ok());
      absl::Status status = WaitLong(*send);
      EXPECT_TRUE(absl::IsCancelled(status) || status.ok()) << status;
      return;
    }
    std::vector<std::unique_ptr<TransportRequest>> pending;
    if (ctx.rank == 0) {
      pending.push_back(ctx.t().channel(2).Recv(got.data(), big, 9));
      pending.push_back(ctx.t().channel(1).Recv(small.data(), 16, 10));  // never sent
    } else {
      pending.push_back(ctx.t().channel(0).Recv(small.data(), 16, 11));  // never sent
    }
    ctx.barrier->Wait();
    for (size_t i = 0; i < pending.size(); ++i) {
      absl::Status status = pending[i]->Wait(Deadline::After(absl::Seconds(60)));
      // Rank 0's first receive is the transfer rank 2 abandons; it would only succeed if all of
      // it crossed before the destructor ran, which a 64 MiB message cannot.
      if (ctx.rank == 0 && i == 0 && status.ok()) continue;
      EXPECT_FALSE(status.ok());
      EXPECT_FALSE(absl::IsDeadlineExceeded(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 2")) << status;
    }
    // Later requests fail at once with the same cause.
    auto later = ctx.t().channel(1 - ctx.rank).Send(small.data(), 16, 12);
    EXPECT_TRUE(later->IsCompleted());
    absl::Status status = WaitLong(*later);
    EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 2")) << status;
  });
}

// Note [Graceful close]: a rank that finished leaves while the others still work with each other.
TEST(TcpTransportTest, PeerThatLeavesCleanlyFailsOnlyWhatInvolvesIt) {
  const size_t big = size_t{8} << 20;
  RunRanks(3, [&](RankContext& ctx) {
    std::vector<char> got(big);
    std::vector<char> last(64);
    if (ctx.rank == 2) {
      auto send = ctx.t().channel(0).Send(Payload(2, 0, 64).data(), 64, 7);
      ASSERT_OK(WaitLong(*send));
      ctx.barrier->Wait();    // (1) its message is out
      ctx.transport.reset();  // leaves, healthy
      ctx.barrier->Wait();    // (2) gone
      return;
    }
    ctx.barrier->Wait();  // (1)
    ctx.barrier->Wait();  // (2)
    // Ranks 0 and 1 go on exchanging a large message.
    const int other = 1 - ctx.rank;
    auto send = ctx.t().channel(other).Send(Payload(ctx.rank, 1, big).data(), big, 8);
    auto recv = ctx.t().channel(other).Recv(got.data(), big, 8);
    ASSERT_OK(WaitLong(*recv));
    ASSERT_OK(WaitLong(*send));
    EXPECT_EQ(Mismatch(got, other, 1), "");
    if (ctx.rank == 0) {
      // What rank 2 sent before it left is still there...
      auto early = ctx.t().channel(2).Recv(last.data(), 64, 7);
      ASSERT_OK(WaitLong(*early));
      EXPECT_EQ(Mismatch(last, 2, 0), "");
      // ...but nothing more will come: a clear error naming it, not a hang.
      auto more = ctx.t().channel(2).Recv(last.data(), 64, 9);
      absl::Status status = more->Wait(Deadline::After(absl::Seconds(60)));
      EXPECT_TRUE(absl::IsUnavailable(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 2")) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "closed its transport")) << status;
    }
  });
}

// Note [Waiter drives]: a channel that fails while a driver is at work (its peer left cleanly,
// Note [Graceful close]) must not stop the driver's other channels. Rank 0 is already waiting
// on rank 2, and so driving every socket, when rank 1 leaves; rank 2 sends only after that, so
// rank 0's wait can only finish if its driver let go of the failed channel and went on with the
// others (a driver stuck on the dead socket, or holding its reader role against Fail, hangs).
// The failed channel comes first in the driver's order, so a driver that gave up at it would
// never reach the live one.
TEST(TcpTransportTest, ChannelFailingMidDriveLeavesTheOthersDriven) {
  const size_t big = size_t{8} << 20;
  absl::Notification rank0_waiting;
  absl::Notification rank1_gone;
  RunRanks(3, [&](RankContext& ctx) {
    if (ctx.rank == 1) {
      rank0_waiting.WaitForNotification();
      absl::SleepFor(absl::Milliseconds(50));  // rank 0 is inside its Wait by now
      ctx.transport.reset();                   // leaves, healthy
      rank1_gone.Notify();
      return;
    }
    if (ctx.rank == 0) {
      std::vector<char> got(big);
      auto recv = ctx.t().channel(2).Recv(got.data(), big, 4);
      rank0_waiting.Notify();
      // It takes well under a second; a driver that stops at the failed channel leaves the data
      // to rare reads of missed events and took 14 s here.
      ASSERT_OK(recv->Wait(Deadline::After(absl::Seconds(10))));
      EXPECT_EQ(Mismatch(got, 2, 4), "");
      std::vector<char> small(16);
      absl::Status status =
          ctx.t().channel(1).Recv(small.data(), 16, 5)->Wait(Deadline::After(absl::Seconds(60)));
      EXPECT_TRUE(absl::IsUnavailable(status)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "peer rank 1")) << status;
      return;
    }
    rank1_gone.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(50));  // rank 0 has seen rank 1's close
    ASSERT_OK(WaitLong(*ctx.t().channel(0).Send(Payload(2, 4, big).data(), big, 4)));
  });
}

// ---- Connection setup --------------------------------------------------------------------------

TEST(TcpTransportTest, StrayConnectionIsRejectedAndSetupCompletes) {
  auto store = std::make_shared<HashStore>();
  absl::StatusOr<std::unique_ptr<Transport>> rank1;
  std::thread t1([&] {
    TransportOptions options;
    options.rank = 1;
    options.world_size = 2;
    options.store = store;
    options.interface_name = "127.0.0.1";
    options.connect_timeout = kLong;
    rank1 = CreateTcpTransport(options);
  });
  // Before rank 0 exists, something else connects to rank 1 and speaks another protocol.
  absl::StatusOr<std::string> address = store->Get("transport/addr/1", kLong);
  ASSERT_TRUE(address.ok()) << address.status();
  absl::StatusOr<TcpSocket> stray =
      TcpSocket::Connect(*SocketAddress::Parse(*address), Deadline::After(kLong));
  ASSERT_TRUE(stray.ok()) << stray.status();
  std::string junk(tcp_wire::kHelloBytes, 'x');
  ASSERT_TRUE(stray->SendAll(junk.data(), junk.size(), Deadline::After(kLong)).ok());
  // It is turned away with a short reason and nothing else: no rank, world size or job id.
  char reply[tcp_wire::kReplyBytes];
  ASSERT_TRUE(stray->RecvAll(reply, sizeof(reply), Deadline::After(kLong)).ok());
  absl::StatusOr<uint32_t> length = tcp_wire::DecodeReply(reply);
  ASSERT_TRUE(length.ok()) << length.status();
  std::string reason(*length, '\0');
  ASSERT_TRUE(stray->RecvAll(reason.data(), *length, Deadline::After(kLong)).ok());
  EXPECT_EQ(reason, "not a member of this job");
  char more;
  absl::Status closed = stray->RecvAll(&more, 1, Deadline::After(kLong));
  EXPECT_TRUE(absl::IsUnavailable(closed)) << "the stray connection should be closed: " << closed;

  TransportOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.store = store;
  options.interface_name = "127.0.0.1";
  options.connect_timeout = kLong;
  absl::StatusOr<std::unique_ptr<Transport>> rank0 = CreateTcpTransport(options);
  t1.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  std::vector<char> got(4095);
  auto recv = (*rank1)->channel(0).Recv(got.data(), got.size(), 0);
  ASSERT_OK(WaitLong(*(*rank0)->channel(1).Send(Payload(0, 0, 4095).data(), 4095, 0)));
  ASSERT_OK(WaitLong(*recv));
  EXPECT_EQ(Mismatch(got, 0, 0), "");
}

TEST(TcpTransportTest, WorldSizeDisagreementFailsBothRanksClearly) {
  auto store = std::make_shared<HashStore>();
  absl::StatusOr<std::unique_ptr<Transport>> results[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      TransportOptions options;
      options.rank = rank;
      options.world_size = rank == 0 ? 3 : 2;  // rank 0 was started with the wrong world size
      options.store = store;
      options.interface_name = "127.0.0.1";
      options.connect_timeout = absl::Seconds(rank == 0 ? 5 : 60);
      results[rank] = CreateTcpTransport(options);
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_FALSE(results[rank].ok()) << "rank " << rank;
    EXPECT_TRUE(absl::StrContains(results[rank].status().message(),
                                  "rank 0 has world size 3 but rank 1 has 2"))
        << results[rank].status();
  }
}

// ---- Real processes ----------------------------------------------------------------------------

int RunWorker(int port, int rank, int world, const std::string& mode) {
  return RunExchangeWorker(port, rank, world, mode, CreateTcpTransport, (16 << 20) + 7, mode);
}

TEST(TcpTransportProcessTest, FourProcessesExchangeLargeMessages) {
  ExpectProcessesExchange(kWorkerFlag, "exchange");
}

TEST(TcpTransportProcessTest, KilledProcessFailsTheOthersNamingIt) {
  ExpectKilledProcessNamed(kWorkerFlag, "until_failure", absl::Seconds(10),
                           [](const WorkerProcess&) { return std::string("rank 3 (127.0.0.1:"); });
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  const int worker =
      paddle::MaybeRunExchangeWorker(argc, argv, paddle::kWorkerFlag, paddle::RunWorker);
  if (worker >= 0) return worker;
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
