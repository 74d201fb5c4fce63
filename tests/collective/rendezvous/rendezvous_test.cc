// Rendezvous: 16 real processes through every URL scheme, and each misconfiguration a user can
// make, checked by the message it produces. Workers are this binary re-executed (see
// paddle/testing/rendezvous_worker.h), so main() below is ours rather than gtest_main's.
#include "paddle/collective/rendezvous/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/file_store.h"
#include "paddle/testing/etcd_server.h"
#include "paddle/testing/rendezvous_worker.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 16;
const absl::Duration kLong = absl::Seconds(120);  // success paths on a loaded 2-core machine
const absl::Duration kLimit = absl::Seconds(240);

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/rdzv.XXXXXX");
  if (mkdtemp(&dir[0]) == nullptr) std::abort();
  return dir;
}

WorkerSpec Spec(std::string url, absl::Duration timeout = kLong) {
  WorkerSpec spec;
  spec.url = std::move(url);
  spec.timeout = timeout;
  return spec;
}

std::string TcpUrl(int port, int rank, int world_size) {
  return absl::StrCat("tcp://127.0.0.1:", port, "?rank=", rank, "&world_size=", world_size);
}

// Runs a job whose rank 0 hosts a TCP store on a free port, retrying with a new port if another
// process took it first (FreeLoopbackPort releases the port before rank 0 binds it).
std::vector<WorkerOutcome> RunTcpJob(const std::function<std::vector<WorkerSpec>(int)>& specs) {
  for (int attempt = 0;; ++attempt) {
    std::vector<WorkerOutcome> out = RunWorkerProcesses(specs(FreeLoopbackPort()), kLimit);
    if (attempt < 3 && absl::StrContains(out[0].output, "ALREADY_EXISTS")) continue;
    return out;
  }
}

void ExpectAllJoined(const std::vector<WorkerOutcome>& out, int world_size) {
  ASSERT_EQ(out.size(), static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(out[r].exit_code, 0) << "worker " << r << ":\n" << out[r].output;
    EXPECT_THAT(out[r].output,
                HasSubstr(absl::StrCat("RENDEZVOUS_OK rank=", r, " world_size=", world_size)));
  }
}

TEST(RendezvousTest, SixteenProcessesThroughTcp) {
  ExpectAllJoined(RunTcpJob([](int port) {
                    std::vector<WorkerSpec> specs;
                    for (int r = 0; r < kWorld; ++r) {
                      specs.push_back(Spec(TcpUrl(port, r, kWorld)));
                    }
                    return specs;
                  }),
                  kWorld);
}

TEST(RendezvousTest, SixteenProcessesThroughEnv) {
  ExpectAllJoined(RunTcpJob([](int port) {
                    std::vector<WorkerSpec> specs;
                    for (int r = 0; r < kWorld; ++r) {
                      specs.push_back({"env://",
                                       kLong,
                                       {{"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", absl::StrCat(port)},
                                        {"RANK", absl::StrCat(r)},
                                        {"WORLD_SIZE", absl::StrCat(kWorld)}}});
                    }
                    return specs;
                  }),
                  kWorld);
}

TEST(RendezvousTest, SixteenProcessesThroughFileAndTheFileIsRemoved) {
  const std::string path = TempDir() + "/store";
  std::vector<WorkerSpec> specs;
  for (int r = 0; r < kWorld; ++r) {
    specs.push_back(Spec(absl::StrCat("file://", path, "?rank=", r, "&world_size=", kWorld)));
  }
  ExpectAllJoined(RunWorkerProcesses(specs, kLimit), kWorld);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the last worker left " << path << " behind";
}

TEST(RendezvousTest, SixteenProcessesThroughEtcd) {
  absl::StatusOr<std::unique_ptr<EtcdServer>> etcd = EtcdServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  std::vector<WorkerSpec> specs;
  for (int r = 0; r < kWorld; ++r) {
    specs.push_back(Spec(absl::StrCat("etcd://", (*etcd)->endpoint(), "/rdzv-test?rank=", r,
                                      "&world_size=", kWorld)));
  }
  ExpectAllJoined(RunWorkerProcesses(specs, kLimit), kWorld);
}

TEST(RendezvousTest, DuplicateRankIsNamed) {
  // Ranks 0, 1, 1 of 3: the second process claiming rank 1 fails, and aborts the join so the
  // others stop waiting for rank 2 and report the same cause.
  std::vector<WorkerOutcome> out = RunTcpJob([](int port) {
    return std::vector<WorkerSpec>{Spec(TcpUrl(port, 0, 3)), Spec(TcpUrl(port, 1, 3)),
                                   Spec(TcpUrl(port, 1, 3))};
  });
  int claimers = 0;
  for (int i = 1; i < 3; ++i) {
    claimers += absl::StrContains(out[i].output, "ALREADY_EXISTS") &&
                absl::StrContains(out[i].output, "rank 1 is claimed by two processes");
  }
  EXPECT_EQ(claimers, 1) << out[1].output << out[2].output;
  EXPECT_NE(out[0].exit_code, 0);
  EXPECT_THAT(out[0].output, HasSubstr("aborted by rank 1: rank 1 is claimed by two processes"));
  for (const WorkerOutcome& o : out) EXPECT_NE(o.exit_code, 0) << o.output;
}

TEST(RendezvousTest, WorldSizeDisagreementNamesBothValuesAndRanks) {
  std::vector<WorkerOutcome> out = RunTcpJob([](int port) {
    return std::vector<WorkerSpec>{Spec(TcpUrl(port, 0, 2)), Spec(TcpUrl(port, 1, 3))};
  });
  const std::string expected = "rank 0 says world_size=2 but rank 1 says world_size=3";
  EXPECT_NE(out[1].exit_code, 0);
  EXPECT_THAT(out[1].output, HasSubstr(expected));
  EXPECT_THAT(out[1].output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_NE(out[0].exit_code, 0);
  EXPECT_THAT(out[0].output, HasSubstr("aborted by rank 1"));
  EXPECT_THAT(out[0].output, HasSubstr(expected));
}

TEST(RendezvousTest, MissingRankAmongProcessesIsNamed) {
  std::vector<WorkerOutcome> out = RunTcpJob([](int port) {
    const absl::Duration timeout = absl::Seconds(10);
    return std::vector<WorkerSpec>{Spec(TcpUrl(port, 0, 4), timeout),
                                   Spec(TcpUrl(port, 1, 4), timeout),
                                   Spec(TcpUrl(port, 3, 4), timeout)};
  });
  for (const WorkerOutcome& o : out) EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_THAT(out[0].output, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(out[0].output, HasSubstr("1 of 4 rank(s) that never arrived: [2]"));
}

TEST(RendezvousTest, LoneRankZeroTimesOutNamingTheOthers) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<RendezvousResult> r =
        Rendezvous(TcpUrl(FreeLoopbackPort(), 0, 3), absl::Seconds(1));
    if (attempt < 3 && r.status().code() == absl::StatusCode::kAlreadyExists) continue;
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("2 of 3 rank(s) that never arrived: [1, 2]"));
    break;
  }
  const std::string path = TempDir() + "/store";
  absl::StatusOr<RendezvousResult> r =
      Rendezvous(absl::StrCat("file://", path, "?rank=0&world_size=3"), absl::Seconds(1));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("never arrived: [1, 2]"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path));
}

TEST(RendezvousTest, UnreachableStoreNamesHostAndPort) {
  const int port = FreeLoopbackPort();  // nothing listens there
  absl::Time start = absl::Now();
  absl::StatusOr<RendezvousResult> r = Rendezvous(TcpUrl(port, 1, 2), absl::Seconds(2));
  absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(r.ok());
  std::string message(r.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(message, HasSubstr("hosted by rank 0"));
  EXPECT_THAT(message, HasSubstr("PADDLE_CONNECT_TIMEOUT_S"));
  EXPECT_GE(waited, absl::Milliseconds(1500)) << "gave up before the connect timeout";
  EXPECT_LT(waited, absl::Seconds(30));
}

TEST(RendezvousTest, UnreachableEtcdNamesTheEndpoint) {
  const int port = FreeLoopbackPort();
  absl::StatusOr<RendezvousResult> r = Rendezvous(
      absl::StrCat("etcd://127.0.0.1:", port, "/job?rank=0&world_size=2"), absl::Seconds(2));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("rank 0 of 2"));
}

TEST(RendezvousTest, PortInUseNamesThePort) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  absl::StatusOr<RendezvousResult> r = Rendezvous(TcpUrl(port, 0, 2), absl::Seconds(5));
  close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
  std::string message(r.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("port ", port)));
}

TEST(RendezvousTest, MisconfigurationsFailBeforeWaiting) {
  absl::Time start = absl::Now();
  absl::StatusOr<RendezvousResult> r =
      Rendezvous("tcp://127.0.0.1:29500?rank=4&world_size=4", absl::Seconds(60));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("rank 4 is out of range"));
  unsetenv("MASTER_ADDR");
  r = Rendezvous("env://", absl::Seconds(60));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("MASTER_ADDR is not set"));
  r = Rendezvous("tcp://127.0.0.1:29500?rank=0&world_size=2000000000", absl::Seconds(60));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("world_size is 2000000000"));
  // Note [Environment settings]: an error, not the default and not DefaultTimeout's abort.
  setenv("PADDLE_CONNECT_TIMEOUT_S", "nan", 1);
  r = Rendezvous("tcp://127.0.0.1:29500?rank=0&world_size=1", absl::Seconds(60));
  unsetenv("PADDLE_CONNECT_TIMEOUT_S");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("PADDLE_CONNECT_TIMEOUT_S=\"nan\""));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RendezvousTest, FileWorldSizeDisagreementNamesBothValues) {
  const std::string path = TempDir() + "/store";
  absl::StatusOr<std::unique_ptr<FileStore>> rank0 = FileStore::Open(path, 2);  // as rank 0 would
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  absl::StatusOr<RendezvousResult> r =
      Rendezvous(absl::StrCat("file://", path, "?rank=1&world_size=3"), absl::Seconds(5));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  std::string message(r.status().message());
  EXPECT_THAT(message, HasSubstr("rank 1 of 3"));
  EXPECT_THAT(message, HasSubstr("created for 2 users but this Open says 3"));
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  int exit_code = 0;
  if (paddle::MaybeRunWorker(argc, argv, &exit_code)) return exit_code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
