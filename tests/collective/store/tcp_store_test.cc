// TcpStore and TcpStoreServer: the Store contract (with and without a job token), then what only a
// networked store has: the token handshake, connecting to a server that starts late, a server
// that goes away, a port in use, cancelled waits, and 200 clients at once.
#include "paddle/collective/store/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/tcp_store_protocol.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "tests/collective/store/store_contract.h"

namespace paddle {
namespace {

const absl::Duration kLong = absl::Seconds(60);  // success paths, generous for a loaded machine
const absl::Duration kShort = absl::Milliseconds(200);  // paths expected to time out

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

std::unique_ptr<TcpStoreServer> StartServer(TcpStoreServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TcpStoreOptions ClientOptions(int port, std::string token = "") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = std::move(token);
  o.timeout = kLong;
  o.connect_timeout = kLong;
  return o;
}

// A port nobody listens on right now: bind to port 0, read it, close.
int FreePort() {
  std::unique_ptr<TcpStoreServer> probe = StartServer();
  return probe == nullptr ? 0 : probe->port();
}

class TcpFixture : public StoreFixture {
 public:
  explicit TcpFixture(std::string token) : token_(std::move(token)) {
    TcpStoreServerOptions options;
    options.token = token_;
    server_ = StartServer(options);
  }
  absl::StatusOr<std::unique_ptr<Store>> NewClient() override {
    if (server_ == nullptr) return absl::UnavailableError("the test server did not start");
    absl::StatusOr<std::unique_ptr<TcpStore>> c =
        TcpStore::Connect(ClientOptions(server_->port(), token_));
    if (!c.ok()) return c.status();
    return std::unique_ptr<Store>(std::move(*c));
  }

 private:
  std::string token_;
  std::unique_ptr<TcpStoreServer> server_;
};

INSTANTIATE_TEST_SUITE_P(
    Tcp, StoreContractTest,
    ::testing::Values(StoreContractParam{"tcp", [] { return std::make_unique<TcpFixture>(""); }},
                      StoreContractParam{
                          "tcp_token",
                          [] { return std::make_unique<TcpFixture>("job-42-secret"); }}),
    StoreContractParamName);

INSTANTIATE_TEST_SUITE_P(
    Tcp, StoreProcessContractTest,
    ::testing::Values(StoreContractParam{"tcp", [] { return std::make_unique<TcpFixture>(""); }},
                      StoreContractParam{
                          "tcp_token",
                          [] { return std::make_unique<TcpFixture>("job-42-secret"); }}),
    StoreContractParamName);

class TcpStoreTest : public ::testing::Test {
 protected:
  // Tests decide tokens explicitly; one inherited from the environment would change them.
  void SetUp() override { unsetenv("PADDLE_STORE_TOKEN"); }
};

TEST_F(TcpStoreTest, RightTokenWorksAndIsNotSentInClear) {
  TcpStoreServerOptions options;
  options.token = "s3cret-token";
  std::unique_ptr<TcpStoreServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port(), "s3cret-token"));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  EXPECT_EQ((*store)->Get("k", kLong).value_or("?"), "v");
  EXPECT_EQ(server->dropped_connections(), 0);
}

TEST_F(TcpStoreTest, TokenFromTheEnvironment) {
  setenv("PADDLE_STORE_TOKEN", "from-env", 1);
  std::unique_ptr<TcpStoreServer> server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  unsetenv("PADDLE_STORE_TOKEN");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Set("k", "v").ok());
  // The server really requires it: a client without it is turned away.
  absl::StatusOr<std::unique_ptr<TcpStore>> none = TcpStore::Connect(ClientOptions(server->port()));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
}

TEST_F(TcpStoreTest, MissingTokenIsRejectedAtOnceWithAClearMessage) {
  TcpStoreServerOptions options;
  options.token = "s3cret-token";
  std::unique_ptr<TcpStoreServer> server = StartServer(options);
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      Contains(store.status(), absl::StrCat("the TCPStore at 127.0.0.1:", server->port(),
                                            " requires a job token; set PADDLE_STORE_TOKEN to the "
                                            "job's token")))
      << store.status();
  // Not retried until connect_timeout (60 s): a missing token will not appear by waiting.
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_F(TcpStoreTest, WrongTokenIsRejectedAndDropped) {
  TcpStoreServerOptions options;
  options.token = "s3cret-token";
  std::unique_ptr<TcpStoreServer> server = StartServer(options);
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port(), "guess"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(store.status(), "token rejected")) << store.status();
  EXPECT_TRUE(Contains(store.status(), absl::StrCat("127.0.0.1:", server->port())))
      << store.status();
  EXPECT_EQ(server->dropped_connections(), 1);
}

// No downgrade: a client that holds a token talks only to a server that can prove it holds it.
TEST_F(TcpStoreTest, ClientWithATokenRefusesAServerThatAsksForNone) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port(), "s3cret-token"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied) << store.status();
  EXPECT_TRUE(Contains(store.status(), "does not ask for the job token")) << store.status();
}

// A server that asks for the token but answers with a proof it could not compute (an impostor
// that relays nothing) is refused before the client sends it a single key.
TEST_F(TcpStoreTest, ClientRefusesAServerThatCannotProveTheToken) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::atomic<bool> got_auth{false};
  std::thread impostor([&] {
    int fd = accept(listener, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    tcp_store::Hello hello;
    hello.token_required = true;
    hello.max_frame_bytes = 1 << 20;
    hello.nonce = std::string(tcp_store::kNonceBytes, 'n');
    std::string out;
    tcp_store::AppendHello(hello, &out);
    ASSERT_EQ(send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    char buf[512];
    got_auth = recv(fd, buf, sizeof(buf), 0) > 0;
    std::string body;
    tcp_store::PutBytes(std::string(32, 'p'), &body);
    out.clear();
    tcp_store::AppendFrame(static_cast<uint8_t>(tcp_store::ReplyCode::kOk), body, &out);
    ASSERT_EQ(send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    recv(fd, buf, sizeof(buf), 0);  // until the client hangs up
    close(fd);
  });
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(ntohs(addr.sin_port), "s3cret-token"));
  impostor.join();
  close(listener);
  EXPECT_TRUE(got_auth.load());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied) << store.status();
  EXPECT_TRUE(Contains(store.status(), "failed to prove it knows the job token")) << store.status();
}

TEST_F(TcpStoreTest, ClientRetriesUntilALateServerStarts) {
  int port = FreePort();
  ASSERT_NE(port, 0);
  absl::Notification connected;
  absl::StatusOr<std::unique_ptr<TcpStore>> store;
  absl::Time start = absl::Now();
  std::thread client([&] {
    store = TcpStore::Connect(ClientOptions(port));
    connected.Notify();
  });
  absl::SleepFor(absl::Milliseconds(300));  // the scenario itself: the server starts late
  EXPECT_FALSE(connected.HasBeenNotified());
  TcpStoreServerOptions options;
  options.port = port;
  std::unique_ptr<TcpStoreServer> server = StartServer(options);
  client.join();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  ASSERT_TRUE((*store)->Set("late", "ok").ok());
  EXPECT_EQ((*store)->Get("late", kLong).value_or("?"), "ok");
}

TEST_F(TcpStoreTest, ConnectGivesUpAfterConnectTimeoutNamingWhatHappened) {
  int port = FreePort();
  TcpStoreOptions options = ClientOptions(port);
  options.connect_timeout = absl::Milliseconds(500);
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(waited, absl::Milliseconds(450));
  EXPECT_LT(waited, absl::Seconds(20));
  for (absl::string_view part :
       {absl::string_view("127.0.0.1:"), absl::string_view("attempt(s)"),
        absl::string_view("Connection refused"), absl::string_view("PADDLE_CONNECT_TIMEOUT_S")}) {
    EXPECT_TRUE(Contains(store.status(), part)) << part << " missing in " << store.status();
  }
  EXPECT_TRUE(Contains(store.status(), absl::StrCat(":", port))) << store.status();
}

TEST_F(TcpStoreTest, ServerGoneGivesUnavailableNamingStoreAndOperation) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  int port = server->port();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ClientOptions(port));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());

  // A Get parked on the server must end when the server does, not at its 60 s timeout.
  absl::StatusOr<std::string> parked;
  absl::Time start = absl::Now();
  std::thread waiter([&] { parked = (*store)->Get("never", kLong); });
  absl::SleepFor(absl::Milliseconds(100));  // lets the Get park; the checks hold either way
  server.reset();
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(parked.status().code(), absl::StatusCode::kUnavailable) << parked.status();

  absl::Status s = (*store)->Set("k2", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, absl::StrCat("TCPStore 127.0.0.1:", port))) << s;
  EXPECT_TRUE(Contains(s, "SET of key 'k2'")) << s;
  // And every later call too, each quickly.
  start = absl::Now();
  absl::StatusOr<int64_t> n = (*store)->Add("c", 1);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  EXPECT_TRUE(Contains(n.status(), "ADD of key 'c'")) << n.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST_F(TcpStoreTest, PortInUseIsAClearErrorNamingHostAndPort) {
  std::unique_ptr<TcpStoreServer> first = StartServer();
  TcpStoreServerOptions options;
  options.port = first->port();
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> second = TcpStoreServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(second.status(), absl::StrCat("127.0.0.1:", first->port())))
      << second.status();
  EXPECT_TRUE(Contains(second.status(), "port 0")) << second.status();
}

TEST_F(TcpStoreTest, TimedOutGetIsCancelledAndTheConnectionReused) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> v = (*store)->Get("absent", kShort);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
    EXPECT_TRUE(Contains(v.status(), "[absent]")) << v.status();
    absl::Status w = (*store)->Wait({"absent", "k"}, kShort);
    EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded) << w;
    ASSERT_TRUE((*store)->Set("k", absl::StrCat(i)).ok());
    EXPECT_EQ((*store)->Get("k", kLong).value_or("?"), absl::StrCat(i));
  }
  // A cancelled wait left no waiter behind: setting the key later answers nobody stale, and a
  // new Get sees the value at once.
  ASSERT_TRUE((*store)->Set("absent", "now").ok());
  EXPECT_EQ((*store)->Get("absent", kLong).value_or("?"), "now");
  EXPECT_EQ(server->dropped_connections(), 0);
}

TEST_F(TcpStoreTest, AParkedGetDoesNotBlockOtherThreadsOfTheSameClient) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> late;
  std::thread waiter([&] { late = (*store)->Get("late", kLong); });
  // These must finish while the waiter is still parked (it waits up to 60 s).
  absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*store)->Set(absl::StrCat("x", i), "1").ok());
    ASSERT_EQ((*store)->Add("n", 1).value_or(-1), i + 1);
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_TRUE((*store)->Set("late", "here").ok());
  waiter.join();
  EXPECT_EQ(late.value_or("?"), "here");
}

TEST_F(TcpStoreTest, ValueOverTheServersFrameLimitIsRefusedBeforeSending) {
  TcpStoreServerOptions options;
  options.max_frame_bytes = 1024;
  std::unique_ptr<TcpStoreServer> server = StartServer(options);
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status s = (*store)->Set("big", std::string(2000, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "max_frame_bytes")) << s;
  EXPECT_TRUE(Contains(s, "SET of key 'big' (2000 bytes)")) << s;
  EXPECT_TRUE((*store)->Set("small", std::string(900, 'x')).ok());
  EXPECT_EQ(server->dropped_connections(), 0);
}

TEST_F(TcpStoreTest, TwoHundredConcurrentClients) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  constexpr int kClients = 200;
  std::atomic<int> failures{0};
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back(absl::StrCat("client/", i));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::unique_ptr<TcpStore>> s =
          TcpStore::Connect(ClientOptions(server->port()));
      if (!s.ok()) {
        ADD_FAILURE() << "client " << i << ": " << s.status();
        ++failures;
        return;
      }
      TcpStore& store = **s;
      bool ok = store.Set(keys[i], absl::StrCat("value-", i)).ok();
      ok = ok && store.Add("clients/counter", 1).ok();
      ok = ok && store.Wait(keys, kLong).ok();  // every client parks until all have set
      for (int j : {0, (i + 1) % kClients, kClients - 1}) {
        ok = ok && store.Get(keys[j], kLong).value_or("?") == absl::StrCat("value-", j);
      }
      if (!ok) ++failures;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  absl::StatusOr<std::unique_ptr<TcpStore>> check =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ((*check)->Get("clients/counter", kLong).value_or("?"), absl::StrCat(kClients));
  EXPECT_EQ((*check)->NumKeys().value_or(-1), kClients + 1);
}

TEST_F(TcpStoreTest, ThousandsOfKeys) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(ClientOptions(server->port()));
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kKeys = 5000;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE((*store)->Set(absl::StrCat("key/", i), absl::StrCat(i * 3)).ok());
  }
  EXPECT_EQ((*store)->NumKeys().value_or(-1), kKeys);
  for (int i = 0; i < kKeys; i += 97) {
    EXPECT_EQ((*store)->Get(absl::StrCat("key/", i), kLong).value_or("?"), absl::StrCat(i * 3));
  }
}

TEST_F(TcpStoreTest, InvalidAddressIsRejected) {
  TcpStoreOptions options = ClientOptions(0);
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << store.status();
}

}  // namespace
}  // namespace paddle
