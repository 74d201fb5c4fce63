// Tests of the TCP transport's connection setup against hostile or broken peers, played over real
// sockets by the test: probes that must learn nothing, silent connections that must not use up the
// connect timeout, impostors without the job's secret on either end of a handshake, and a peer
// that knows the secret but sends a rank out of range.
#include "paddle/collective/transport/tcp/tcp_mesh.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/transport/tcp/tcp_socket.h"
#include "paddle/collective/transport/tcp/tcp_wire.h"

namespace paddle {
namespace {

constexpr absl::Duration kLong = absl::Seconds(60);

TcpMeshOptions Options(HashStore* store, int rank, int world_size, absl::Duration timeout) {
  TcpMeshOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.store = store;
  o.store_prefix = "mesh";
  o.interface_name = "127.0.0.1";
  o.connect_timeout = timeout;
  return o;
}

// Rank `rank` of `world_size` building its mesh on a thread of its own.
class MeshRank {
 public:
  explicit MeshRank(TcpMeshOptions options) : options_(std::move(options)) {
    thread_ = std::thread([this] { result_ = ConnectFullMesh(options_); });
  }
  ~MeshRank() { Join(); }
  absl::StatusOr<std::vector<TcpMeshLink>>& Join() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  TcpMeshOptions options_;
  absl::StatusOr<std::vector<TcpMeshLink>> result_;
  std::thread thread_;
};

TcpSocket ConnectTo(HashStore& store, int rank) {
  absl::StatusOr<std::string> address = store.Get(absl::StrCat("mesh/addr/", rank), kLong);
  EXPECT_TRUE(address.ok()) << address.status();
  absl::StatusOr<TcpSocket> sock =
      TcpSocket::Connect(*SocketAddress::Parse(*address), Deadline::After(kLong));
  EXPECT_TRUE(sock.ok()) << sock.status();
  return std::move(*sock);
}

TransportKey KeyOf(HashStore& store, const std::string& token = "") {
  absl::StatusOr<std::string> secret = store.Get("mesh/secret", kLong);
  EXPECT_TRUE(secret.ok()) << secret.status();
  return DeriveTransportKey(absl::HexStringToBytes(*secret), token);
}

// Reads a Reply header and its text; "" when it lets the handshake go on.
std::string ReadReply(const TcpSocket& sock) {
  char reply[tcp_wire::kReplyBytes];
  absl::Status got = sock.RecvAll(reply, sizeof(reply), Deadline::After(kLong));
  if (!got.ok()) return absl::StrCat("<", got.message(), ">");
  absl::StatusOr<uint32_t> length = tcp_wire::DecodeReply(reply);
  if (!length.ok()) return absl::StrCat("<", length.status().message(), ">");
  std::string text(*length, '\0');
  got = sock.RecvAll(text.data(), text.size(), Deadline::After(kLong));
  return got.ok() ? text : absl::StrCat("<", got.message(), ">");
}

// Plays a connector that holds `key` and claims to be `hello.rank`; returns the acceptor's final
// reply ("" = accepted), or its first one if it turned the Hello away. `key_is_right`: the
// acceptor's proof must check out against it.
std::string PlayConnector(const TcpSocket& sock, const TransportKey& key, tcp_wire::Hello hello,
                          bool valid_proof = true, bool key_is_right = true) {
  hello.job_id = key.job_id;
  char hello_c[tcp_wire::kHelloBytes];
  tcp_wire::EncodeHello(hello, hello_c);
  EXPECT_TRUE(sock.SendAll(hello_c, sizeof(hello_c), Deadline::After(kLong)).ok());
  std::string first = ReadReply(sock);
  if (!first.empty()) return first;
  char answer[tcp_wire::kHelloBytes + tcp_wire::kProofBytes];
  EXPECT_TRUE(sock.RecvAll(answer, sizeof(answer), Deadline::After(kLong)).ok());
  EXPECT_EQ(HandshakeProof(key.key, true, hello_c, answer) ==
                std::string(answer + tcp_wire::kHelloBytes, tcp_wire::kProofBytes),
            key_is_right)
      << "the acceptor's proof";
  std::string proof = HandshakeProof(key.key, false, hello_c, answer);
  if (!valid_proof) proof[0] ^= 1;
  EXPECT_TRUE(sock.SendAll(proof.data(), proof.size(), Deadline::After(kLong)).ok());
  return ReadReply(sock);
}

TEST(TcpMeshTest, ProbesLearnNothingAboutTheJob) {
  HashStore store;
  MeshRank rank1(Options(&store, 1, 2, kLong));
  TcpSocket probe = ConnectTo(store, 1);
  std::string junk(tcp_wire::kHelloBytes, '\x01');
  ASSERT_TRUE(probe.SendAll(junk.data(), junk.size(), Deadline::After(kLong)).ok());
  // The whole answer, up to the close: a Reply header and a fixed text, nothing of the job.
  std::string answer;
  char c;
  while (probe.RecvAll(&c, 1, Deadline::After(kLong)).ok()) answer.push_back(c);
  EXPECT_EQ(answer.substr(tcp_wire::kReplyBytes), "not a member of this job");
  TransportKey key = KeyOf(store);
  std::string job_id(reinterpret_cast<const char*>(&key.job_id), sizeof(key.job_id));
  EXPECT_FALSE(absl::StrContains(answer, job_id));

  MeshRank rank0(Options(&store, 0, 2, kLong));
  ASSERT_TRUE(rank0.Join().ok()) << rank0.Join().status();
  ASSERT_TRUE(rank1.Join().ok()) << rank1.Join().status();
}

// Handshakes used to be served one at a time, 10 s each: a dozen silent connections outlasted a
// 30 s connect timeout. Now they wait side by side and cost nothing.
TEST(TcpMeshTest, SilentConnectionsDoNotHoldUpSetup) {
  HashStore store;
  MeshRank rank1(Options(&store, 1, 2, absl::Seconds(30)));
  std::vector<TcpSocket> silent;
  for (int i = 0; i < 12; ++i) silent.push_back(ConnectTo(store, 1));
  absl::SleepFor(absl::Milliseconds(100));  // all of them accepted before rank 0 comes
  absl::Time start = absl::Now();
  MeshRank rank0(Options(&store, 0, 2, absl::Seconds(30)));
  ASSERT_TRUE(rank0.Join().ok()) << rank0.Join().status();
  ASSERT_TRUE(rank1.Join().ok()) << rank1.Join().status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(9)) << "rank 1 waited for a silent connection";
}

// Past 64 handshakes in progress the oldest is dropped, so a flood cannot lock peers out.
TEST(TcpMeshTest, AFloodOfConnectionsCannotLockPeersOut) {
  HashStore store;
  MeshRank rank1(Options(&store, 1, 2, absl::Seconds(30)));
  std::vector<TcpSocket> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(ConnectTo(store, 1));
  MeshRank rank0(Options(&store, 0, 2, absl::Seconds(30)));
  ASSERT_TRUE(rank0.Join().ok()) << rank0.Join().status();
  ASSERT_TRUE(rank1.Join().ok()) << rank1.Join().status();
}

// A peer that learnt the job id (it is sent in the clear) but not the secret gets no further.
TEST(TcpMeshTest, ConnectorWithoutTheSecretIsRejected) {
  HashStore store;
  MeshRank rank1(Options(&store, 1, 2, kLong));
  TcpSocket impostor = ConnectTo(store, 1);
  TransportKey wrong = KeyOf(store);
  wrong.key[0] ^= 1;  // the right job id, the wrong key
  tcp_wire::Hello hello;
  hello.rank = 0;
  hello.world_size = 3;  // would fail the job if it were believed
  hello.peer = 1;
  EXPECT_EQ(PlayConnector(impostor, wrong, hello, true, /*key_is_right=*/false),
            "not a member of this job");
  MeshRank rank0(Options(&store, 0, 2, kLong));
  ASSERT_TRUE(rank0.Join().ok()) << rank0.Join().status();
  ASSERT_TRUE(rank1.Join().ok()) << rank1.Join().status();
}

TEST(TcpMeshTest, AProofThatDoesNotCheckOutIsRejected) {
  HashStore store;
  MeshRank rank1(Options(&store, 1, 2, kLong));
  TcpSocket impostor = ConnectTo(store, 1);
  tcp_wire::Hello hello;
  hello.rank = 0;
  hello.world_size = 2;
  hello.peer = 1;
  EXPECT_EQ(PlayConnector(impostor, KeyOf(store), hello, /*valid_proof=*/false),
            "not a member of this job");
  MeshRank rank0(Options(&store, 0, 2, kLong));
  ASSERT_TRUE(rank0.Join().ok()) << rank0.Join().status();
  ASSERT_TRUE(rank1.Join().ok()) << rank1.Join().status();
}

// A rank of 2^31 or more once turned negative and indexed past the links (ASan: out of bounds).
TEST(TcpMeshTest, RankOutOfRangeFailsClearlyInsteadOfIndexingPastTheLinks) {
  for (uint32_t rank : {0x80000001u, 0xffffffffu, 2u}) {
    HashStore store;
    MeshRank rank1(Options(&store, 1, 2, kLong));
    TcpSocket member = ConnectTo(store, 1);
    tcp_wire::Hello hello;
    hello.rank = rank;
    hello.world_size = 2;
    hello.peer = 1;
    std::string reason = PlayConnector(member, KeyOf(store), hello);
    EXPECT_TRUE(absl::StrContains(reason, absl::StrCat("rank ", rank, " connected to rank 1")))
        << reason;
    absl::StatusOr<std::vector<TcpMeshLink>>& result = rank1.Join();
    ASSERT_FALSE(result.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
    EXPECT_TRUE(absl::StrContains(result.status().message(), absl::StrCat("rank ", rank)))
        << result.status();
  }
}

// The connector checks the acceptor too: an address in the store that does not prove the secret
// (a stale one, or a process squatting on the port) is not taken for the rank.
TEST(TcpMeshTest, AcceptorWithoutTheSecretIsRefused) {
  HashStore store;
  absl::StatusOr<TcpSocket> listener = TcpSocket::Listen(*SocketAddress::Parse("127.0.0.1:0"), 4);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_TRUE(store.Set("mesh/addr/1", listener->LocalAddress()->ToString()).ok());
  std::thread impostor([&] {
    SocketAddress from;
    absl::StatusOr<TcpSocket> sock = listener->Accept(Deadline::After(kLong), &from);
    ASSERT_TRUE(sock.ok()) << sock.status();
    char hello_c[tcp_wire::kHelloBytes];
    ASSERT_TRUE(sock->RecvAll(hello_c, sizeof(hello_c), Deadline::After(kLong)).ok());
    tcp_wire::Hello c;
    ASSERT_TRUE(tcp_wire::DecodeHello(hello_c, &c).ok());
    tcp_wire::Hello a;
    a.rank = 1;
    a.world_size = 2;
    a.peer = 0;
    a.job_id = c.job_id;  // copied from the connector, as an impostor could
    std::string out(tcp_wire::kReplyBytes + tcp_wire::kHelloBytes, '\0');
    tcp_wire::EncodeReply(0, out.data());
    tcp_wire::EncodeHello(a, out.data() + tcp_wire::kReplyBytes);
    out += HandshakeProof("a guess", true, hello_c, out.data() + tcp_wire::kReplyBytes);
    ASSERT_TRUE(sock->SendAll(out.data(), out.size(), Deadline::After(kLong)).ok());
    char rest[64];
    (void)sock->RecvAll(rest, sizeof(rest), Deadline::After(absl::Seconds(5)));
  });
  absl::StatusOr<std::vector<TcpMeshLink>> rank0 =
      ConnectFullMesh(Options(&store, 0, 2, absl::Seconds(20)));
  impostor.join();
  ASSERT_FALSE(rank0.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(rank0.status())) << rank0.status();
  EXPECT_TRUE(absl::StrContains(rank0.status().message(), "failed to prove the job's secret"))
      << rank0.status();
}

// Two ranks with different job tokens share a store but never a link.
TEST(TcpMeshTest, RanksWithAnotherJobTokenDoNotConnect) {
  HashStore store;
  TcpMeshOptions o1 = Options(&store, 1, 2, absl::Seconds(3));
  o1.job_token = "token of the job";
  MeshRank rank1(o1);
  TcpMeshOptions o0 = Options(&store, 0, 2, absl::Seconds(20));
  o0.job_token = "another token";
  absl::StatusOr<std::vector<TcpMeshLink>> rank0 = ConnectFullMesh(o0);
  ASSERT_FALSE(rank0.ok());
  EXPECT_TRUE(absl::StrContains(rank0.status().message(), "not a member of this job"))
      << rank0.status();
  absl::StatusOr<std::vector<TcpMeshLink>>& result = rank1.Join();
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::StrContains(result.status().message(), "another job")) << result.status();
}

TEST(TcpMeshTest, FourRanksWithATokenConnect) {
  HashStore store;
  std::vector<std::unique_ptr<MeshRank>> ranks;
  for (int r = 0; r < 4; ++r) {
    TcpMeshOptions o = Options(&store, r, 4, kLong);
    o.job_token = "t";
    ranks.push_back(std::make_unique<MeshRank>(o));
  }
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<std::vector<TcpMeshLink>>& links = ranks[r]->Join();
    ASSERT_TRUE(links.ok()) << links.status();
    for (int p = 0; p < 4; ++p) EXPECT_EQ((*links)[p].socket.valid(), p != r);
  }
}

}  // namespace
}  // namespace paddle
