// TcpStoreServer under hostile peers: garbage, half frames, oversized length fields, broken field
// lengths and idle connections are dropped one by one, with a logged reason naming the peer,
// while real clients on the same server keep getting correct answers.
#include "paddle/collective/store/tcp_store_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_protocol.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

using tcp_store::Op;
using tcp_store::ReplyCode;
using tcp_store::Request;

const absl::Duration kLong = absl::Seconds(60);
const absl::Duration kIdle = absl::Seconds(1);  // the server's idle_timeout in these tests

// Log lines, captured through SetLogSink (a plain function pointer, hence the globals). A
// std::mutex so ThreadSanitizer, which cannot see into Debian's Abseil, sees the locking.
std::mutex log_mu;
std::vector<std::string>* log_lines = nullptr;  // guarded by log_mu
void CaptureLine(absl::string_view line) {
  std::lock_guard<std::mutex> lock(log_mu);
  if (log_lines != nullptr) log_lines->emplace_back(line);
}

// A hand-driven socket to the server, for sending what no real client would.
class RawPeer {
 public:
  explicit RawPeer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawPeer() { close(fd_); }

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void Send(absl::string_view bytes) {
    ASSERT_EQ(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Reads the next frame (type and body); false on EOF, error or after `timeout`.
  bool ReadFrame(uint8_t* type, std::string* body, absl::Duration timeout = kLong) {
    Deadline deadline = Deadline::After(timeout);
    while (true) {
      absl::string_view view;
      absl::StatusOr<bool> got = frames_.Next(type, &view);
      if (!got.ok()) return false;
      if (*got) {
        body->assign(view.data(), view.size());
        return true;
      }
      if (!ReadSome(deadline)) return false;
    }
  }

  // Reads HELLO and sends an empty AUTH (server without token); true when the server said OK.
  bool Handshake() {
    uint8_t type;
    std::string body;
    if (!ReadFrame(&type, &body) || type != static_cast<uint8_t>(ReplyCode::kHello)) return false;
    Request auth;
    auth.op = Op::kAuth;
    std::string frame;
    tcp_store::AppendRequest(auth, &frame);
    Send(frame);
    return ReadFrame(&type, &body) && type == static_cast<uint8_t>(ReplyCode::kOk);
  }

  // Waits for the server to close the connection, returning the last PROTOCOL_ERROR message it
  // sent before closing ("" if none). False if the connection is still open after `timeout`.
  bool WaitClosed(absl::Duration timeout, std::string* last_error) {
    Deadline deadline = Deadline::After(timeout);
    while (true) {
      uint8_t type;
      absl::string_view view;
      while (frames_.Next(&type, &view).value_or(false)) {
        if (type == static_cast<uint8_t>(ReplyCode::kProtocolError)) {
          tcp_store::FieldReader reader("reply", view);
          reader.ReadBytes("message", last_error).IgnoreError();
        }
      }
      if (deadline.Expired()) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, deadline.PollTimeoutMillis()) <= 0) continue;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;  // EOF or reset: closed
      frames_.Append(absl::string_view(buf, static_cast<size_t>(n)));
    }
  }

 private:
  bool ReadSome(const Deadline& deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, deadline.PollTimeoutMillis()) <= 0) return false;
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    frames_.Append(absl::string_view(buf, static_cast<size_t>(n)));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  tcp_store::FrameBuffer frames_{1 << 20, tcp_store::IsValidReplyCode};
};

std::string Header(uint32_t length, uint8_t type) {
  std::string out;
  tcp_store::PutU32(length, &out);
  tcp_store::PutU8(type, &out);
  return out;
}

class TcpStoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard<std::mutex> lock(log_mu);
      log_lines = &lines_;
    }
    SetLogSink(CaptureLine);
    // The drop warnings are part of what is tested; make sure the level lets them through
    // (only when needed: SetLogConfig never frees the configuration it replaces).
    if (!LogEnabled(LogLevel::kWarn, kLogStore)) {
      LogConfig config = ActiveLogConfig();
      config.level = std::max(config.level, LogLevel::kWarn);
      config.subsys_mask |= kLogStore;
      SetLogConfig(config);
    }
    TcpStoreServerOptions options;
    options.idle_timeout = kIdle;
    options.handshake_timeout = kIdle;
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    server_.reset();
    SetLogSink(nullptr);
    std::lock_guard<std::mutex> lock(log_mu);
    log_lines = nullptr;
  }

  std::unique_ptr<TcpStore> Client() {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.timeout = kLong;
    o.connect_timeout = kLong;
    absl::StatusOr<std::unique_ptr<TcpStore>> c = TcpStore::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Whether some captured WARN line says the connection from a peer was dropped for `reason`.
  bool Logged(absl::string_view reason) {
    std::lock_guard<std::mutex> lock(log_mu);
    for (const std::string& line : lines_) {
      if (!line.empty() && line[0] == 'W' && line.find(" STORE ") != std::string::npos &&
          line.find("dropping connection from 127.0.0.1:") != std::string::npos &&
          absl::StrContains(line, reason)) {
        return true;
      }
    }
    return false;
  }

  std::string AllLines() {
    std::lock_guard<std::mutex> lock(log_mu);
    std::string all;
    for (const std::string& line : lines_) all += line;
    return all;
  }

  std::vector<std::string> lines_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreServerTest, WaitForClientsToLeaveReturnsOnceTheyHaveClosed) {
  std::unique_ptr<TcpStore> a = Client();
  std::unique_ptr<TcpStore> b = Client();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Set("k", "v").ok());
  ASSERT_TRUE(b->Get("k").ok());
  EXPECT_GE(server_->open_connections(), 2);
  // A client that stays makes the wait time out, naming how many are left.
  absl::Status s = server_->WaitForClientsToLeave(0, absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("client connection(s) still open"), std::string::npos) << s;
  std::thread leaver([&] {
    absl::SleepFor(absl::Milliseconds(50));
    a.reset();
    b.reset();
  });
  EXPECT_TRUE(server_->WaitForClientsToLeave(0, kLong).ok());
  EXPECT_EQ(server_->open_connections(), 0);
  leaver.join();
}

TEST_F(TcpStoreServerTest, HostilePeersAreDroppedWhileRealClientsKeepWorking) {
  // Real clients hammer the store the whole time and check every answer.
  constexpr int kWorkers = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int64_t> ops{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    std::unique_ptr<TcpStore> client = Client();
    ASSERT_NE(client, nullptr);
    workers.emplace_back([&, w, store = std::shared_ptr<TcpStore>(std::move(client))] {
      int64_t total = 0;
      for (int i = 0; !stop.load() || i < 20; ++i) {
        std::string key = absl::StrCat("w", w, "/", i % 50);
        std::string value = absl::StrCat("value-", w, "-", i);
        bool ok = store->Set(key, value).ok();
        ok = ok && store->Get(key, kLong).value_or("?") == value;
        absl::StatusOr<int64_t> n = store->Add(absl::StrCat("w", w, "/count"), 1);
        ok = ok && n.ok() && *n == ++total;
        if (!ok) {
          ++failures;
          return;
        }
        ++ops;
      }
    });
  }

  std::string why;
  // 1. Not our protocol at all: an HTTP request. Its first 4 bytes read as a ~540 MB length.
  RawPeer http(server_->port());
  ASSERT_TRUE(http.connected());
  http.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(http.WaitClosed(kLong, &why));
  EXPECT_NE(why.find("exceeds the limit"), std::string::npos) << why;

  // 2. After the handshake, a length field of 4 GiB: dropped from the header alone.
  RawPeer huge(server_->port());
  ASSERT_TRUE(huge.Handshake());
  huge.Send(Header(0xffffffffu, static_cast<uint8_t>(Op::kSet)));
  EXPECT_TRUE(huge.WaitClosed(kLong, &why));
  EXPECT_NE(why.find("frame length 4294967295 exceeds"), std::string::npos) << why;

  // 3. An unknown opcode.
  RawPeer opcode(server_->port());
  ASSERT_TRUE(opcode.Handshake());
  opcode.Send(Header(1, 0x77));
  EXPECT_TRUE(opcode.WaitClosed(kLong, &why));
  EXPECT_NE(why.find("unknown frame type 0x77"), std::string::npos) << why;

  // 4. A SET whose key length runs past the end of its frame.
  RawPeer lengths(server_->port());
  ASSERT_TRUE(lengths.Handshake());
  std::string body;
  tcp_store::PutU32(1000, &body);
  body += "short";
  lengths.Send(Header(1 + body.size(), static_cast<uint8_t>(Op::kSet)) + body);
  EXPECT_TRUE(lengths.WaitClosed(kLong, &why));
  EXPECT_NE(why.find("claims 1000 bytes"), std::string::npos) << why;

  // 5. Pure random bytes before any handshake.
  RawPeer garbage(server_->port());
  std::string noise;
  for (int i = 0; i < 256; ++i) noise.push_back(static_cast<char>((i * 73 + 41) & 0xff));
  garbage.Send(noise);
  EXPECT_TRUE(garbage.WaitClosed(kLong, &why));

  // 6. A request sent while a GET is parked (only CANCEL may follow it).
  RawPeer pipelined(server_->port());
  ASSERT_TRUE(pipelined.Handshake());
  Request get;
  get.op = Op::kGet;
  get.keys = {"never-set"};
  Request num;
  num.op = Op::kNumKeys;
  std::string frames;
  tcp_store::AppendRequest(get, &frames);
  tcp_store::AppendRequest(num, &frames);
  pipelined.Send(frames);
  EXPECT_TRUE(pipelined.WaitClosed(kLong, &why));
  EXPECT_NE(why.find("only CANCEL may follow"), std::string::npos) << why;

  // 7-9. Slow peers, all at once so the idle bound is waited out once: half a frame that never
  // completes, a connection that never does the handshake, and half a frame then a hang-up.
  RawPeer half(server_->port());
  ASSERT_TRUE(half.Handshake());
  half.Send(Header(100, static_cast<uint8_t>(Op::kSet)) + "only-ten..");
  RawPeer silent(server_->port());
  ASSERT_TRUE(silent.connected());
  {
    RawPeer truncated(server_->port());
    ASSERT_TRUE(truncated.Handshake());
    truncated.Send(Header(50, static_cast<uint8_t>(Op::kSet)));
  }  // closed mid-frame
  absl::Time slow_start = absl::Now();
  EXPECT_TRUE(half.WaitClosed(kLong, &why));
  EXPECT_TRUE(silent.WaitClosed(kLong, &why));
  // Not before the bound (minus a sweep's rounding), and not much after it.
  EXPECT_GE(absl::Now() - slow_start, kIdle / 2);

  // 10. An authenticated connection sitting idle between frames is NOT a slow peer.
  std::unique_ptr<TcpStore> idle_client = Client();
  ASSERT_NE(idle_client, nullptr);
  ASSERT_TRUE(idle_client->Set("idle", "1").ok());
  absl::SleepFor(kIdle * 2.5);  // the scenario itself: longer than idle_timeout
  EXPECT_TRUE(idle_client->Set("idle", "2").ok());
  EXPECT_EQ(idle_client->Get("idle", kLong).value_or("?"), "2");

  stop.store(true);
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(ops.load(), 0);
  // Eight misbehaving connections dropped (the truncated one closed itself), and said why.
  EXPECT_EQ(server_->dropped_connections(), 8);
  EXPECT_TRUE(Logged("exceeds the limit"));
  EXPECT_TRUE(Logged("unknown frame type 0x77"));
  EXPECT_TRUE(Logged("claims 1000 bytes"));
  EXPECT_TRUE(Logged("only CANCEL may follow"));
  EXPECT_TRUE(Logged("a frame stayed incomplete"));
  EXPECT_TRUE(Logged("no handshake within"));
}

// Pipelined GETs whose replies (25 MiB) far exceed what the server queues per connection: the
// server stops parsing until the peer reads, then answers every one; a peer that never reads is
// dropped after idle_timeout.
TEST_F(TcpStoreServerTest, BackpressureOnPeersThatReadSlowlyOrNever) {
  constexpr int kGets = 100;
  const std::string value(256 << 10, 'z');
  std::unique_ptr<TcpStore> client = Client();
  ASSERT_TRUE(client->Set("big", value).ok());
  Request get;
  get.op = Op::kGet;
  get.keys = {"big"};
  std::string frames;
  for (int i = 0; i < kGets; ++i) tcp_store::AppendRequest(get, &frames);

  RawPeer slow(server_->port());
  ASSERT_TRUE(slow.Handshake());
  slow.Send(frames);
  RawPeer never(server_->port());
  ASSERT_TRUE(never.Handshake());
  never.Send(frames);
  absl::SleepFor(absl::Milliseconds(300));  // the scenario itself: the reader is late
  for (int i = 0; i < kGets; ++i) {
    uint8_t type;
    std::string body;
    ASSERT_TRUE(slow.ReadFrame(&type, &body)) << "reply " << i << "\n" << AllLines();
    ASSERT_EQ(type, static_cast<uint8_t>(ReplyCode::kOk));
    ASSERT_EQ(body.size(), 4 + value.size());
  }
  // Reading would un-stick `never`, so watch the server's drop counter instead.
  Deadline deadline = Deadline::After(kLong);
  while (server_->dropped_connections() == 0 && !deadline.Expired()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server_->dropped_connections(), 1);
  EXPECT_TRUE(Logged("did not read")) << "no drop logged for the peer that never reads:\n"
                                      << AllLines();
  std::string why;
  EXPECT_TRUE(never.WaitClosed(kLong, &why));
  EXPECT_EQ(client->Get("big", kLong).value_or("?").size(), value.size());
}

TEST_F(TcpStoreServerTest, CancelAnswersTheParkedRequestThenItself) {
  RawPeer peer(server_->port());
  ASSERT_TRUE(peer.Handshake());
  Request wait;
  wait.op = Op::kWait;
  wait.keys = {"a", "b"};
  Request cancel;
  cancel.op = Op::kCancel;
  std::unique_ptr<TcpStore> client = Client();
  ASSERT_TRUE(client->Set("a", "1").ok());
  std::string frames;
  tcp_store::AppendRequest(wait, &frames);
  tcp_store::AppendRequest(cancel, &frames);
  peer.Send(frames);
  uint8_t type;
  std::string body;
  ASSERT_TRUE(peer.ReadFrame(&type, &body));
  EXPECT_EQ(type, static_cast<uint8_t>(ReplyCode::kCancelled));
  tcp_store::FieldReader reader("reply", body);
  std::vector<std::string> missing;
  ASSERT_TRUE(reader.ReadList("missing", &missing).ok());
  EXPECT_EQ(missing, std::vector<std::string>{"b"});
  ASSERT_TRUE(peer.ReadFrame(&type, &body));
  EXPECT_EQ(type, static_cast<uint8_t>(ReplyCode::kCancelled));
  // The connection is clean: a new request is answered normally.
  Request num;
  num.op = Op::kNumKeys;
  frames.clear();
  tcp_store::AppendRequest(num, &frames);
  peer.Send(frames);
  ASSERT_TRUE(peer.ReadFrame(&type, &body));
  EXPECT_EQ(type, static_cast<uint8_t>(ReplyCode::kOk));
  // And setting "b" now wakes nobody stale.
  ASSERT_TRUE(client->Set("b", "2").ok());
  EXPECT_EQ(server_->dropped_connections(), 0);
}

TEST_F(TcpStoreServerTest, RequestWithoutTheTokenGetsTheMessageThenTheConnectionCloses) {
  TcpStoreServerOptions options;
  options.token = "t0ken";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> secured = TcpStoreServer::Start(options);
  ASSERT_TRUE(secured.ok()) << secured.status();
  RawPeer peer((*secured)->port());
  uint8_t type;
  std::string body;
  ASSERT_TRUE(peer.ReadFrame(&type, &body));
  absl::StatusOr<tcp_store::Hello> hello = tcp_store::DecodeHello(body);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_TRUE(hello->token_required);
  EXPECT_EQ(hello->nonce.size(), tcp_store::kNonceBytes);
  EXPECT_EQ(body.find("t0ken"), std::string::npos);  // the token is never sent
  Request set;
  set.op = Op::kSet;
  set.keys = {"k"};
  set.value = "v";
  std::string frame;
  tcp_store::AppendRequest(set, &frame);
  peer.Send(frame);
  ASSERT_TRUE(peer.ReadFrame(&type, &body));
  EXPECT_EQ(type, static_cast<uint8_t>(ReplyCode::kUnauthenticated));
  EXPECT_NE(body.find("requires a job token; set PADDLE_STORE_TOKEN"), std::string::npos);
  EXPECT_TRUE(peer.WaitClosed(kLong, &body));
  EXPECT_EQ((*secured)->dropped_connections(), 1);
}

// Before its handshake a connection gets a few hundred bytes per frame (not 64 MiB) and seconds
// to finish (not the idle timeout of minutes).
TEST_F(TcpStoreServerTest, StrangersGetSmallFramesAndLittleTime) {
  TcpStoreServerOptions options;
  options.token = "t0ken";
  options.handshake_timeout = absl::Milliseconds(300);  // idle_timeout stays at its 600 s
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> secured = TcpStoreServer::Start(options);
  ASSERT_TRUE(secured.ok()) << secured.status();
  RawPeer big((*secured)->port());
  uint8_t type;
  std::string body;
  ASSERT_TRUE(big.ReadFrame(&type, &body));  // HELLO
  big.Send(Header(60 << 20, static_cast<uint8_t>(Op::kSet)) + std::string(4096, 'x'));
  std::string why;
  EXPECT_TRUE(big.WaitClosed(absl::Seconds(5), &why));
  EXPECT_TRUE(absl::StrContains(why, "exceeds the limit of 256 bytes")) << why;

  RawPeer silent((*secured)->port());
  absl::Time start = absl::Now();
  EXPECT_TRUE(silent.WaitClosed(absl::Seconds(20), &why));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(Logged("no handshake within")) << AllLines();
}

// At max_connections a newcomer replaces the oldest connection still handshaking, so silent
// sockets cannot lock clients out; when every open connection has authenticated the newcomer is
// refused instead.
TEST_F(TcpStoreServerTest, AtMaxConnectionsTheOldestStrangerMakesRoom) {
  TcpStoreServerOptions options;
  options.max_connections = 8;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> small = TcpStoreServer::Start(options);
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<std::unique_ptr<RawPeer>> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(std::make_unique<RawPeer>((*small)->port()));
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = (*small)->port();
  o.timeout = kLong;
  o.connect_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  EXPECT_TRUE(Logged("connections open (max_connections)")) << AllLines();

  // Seven members (with the client, eight) push out the last of the silent ones.
  std::vector<std::unique_ptr<RawPeer>> members;
  for (int i = 0; i < 7; ++i) {
    members.push_back(std::make_unique<RawPeer>((*small)->port()));
    ASSERT_TRUE(members.back()->Handshake()) << "member " << i;
  }
  RawPeer one_too_many((*small)->port());
  std::string why;
  EXPECT_TRUE(one_too_many.WaitClosed(kLong, &why));
  EXPECT_EQ((*small)->refused_connections(), 1);
  EXPECT_EQ((*client)->Get("k", kLong).value_or("?"), "v");  // members keep working
}

long ResidentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// 1000 idle connections and 200 that start 60 MiB frames (sending the first MiB of each) cost
// the server little memory, and a real client with the token still gets in at once.
TEST_F(TcpStoreServerTest, IdleConnectionsAndHalfSentHugeFramesCostLittle) {
  TcpStoreServerOptions options;
  options.token = "t0ken";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> secured = TcpStoreServer::Start(options);
  ASSERT_TRUE(secured.ok()) << secured.status();
  long before = ResidentKiB();
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < 1000; ++i) {
    peers.push_back(std::make_unique<RawPeer>((*secured)->port()));
    ASSERT_TRUE(peers.back()->connected()) << "connection " << i;
  }
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 200; ++i) {
    auto peer = std::make_unique<RawPeer>((*secured)->port());
    ASSERT_TRUE(peer->connected());
    std::string header = Header(60 << 20, static_cast<uint8_t>(Op::kSet));
    // The server drops the connection at the header; the rest may meet a reset.
    ssize_t n = send(peer->fd(), header.data(), header.size(), MSG_NOSIGNAL);
    EXPECT_EQ(n, static_cast<ssize_t>(header.size()));
    (void)send(peer->fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    peers.push_back(std::move(peer));
  }
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = (*secured)->port();
  o.token = "t0ken";
  o.timeout = kLong;
  o.connect_timeout = absl::Seconds(10);
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  long grown_mib = (ResidentKiB() - before) / 1024;
  std::printf("resident memory grew by %ld MiB with %zu connections\n", grown_mib, peers.size());
  EXPECT_LT(grown_mib, 256);
  EXPECT_GE((*secured)->dropped_connections(), 1);
}

}  // namespace
}  // namespace paddle
