// EtcdStore against a real etcd: the Store contract suite, plus what only etcd has: job prefixes,
// leases that outlive a client by their TTL and expire after a crash, and the errors a user meets
// when etcd is unreachable or goes away mid-run.
#include "paddle/collective/store/etcd_store.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/core/status.h"
#include "paddle/testing/etcd_server.h"
#include "tests/collective/store/store_contract.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

const absl::Duration kLong = absl::Seconds(60);  // success paths on a loaded machine

// One etcd for the whole binary (starting one takes about a second); tests keep apart through
// their prefixes. Tests that stop a server start their own.
class SharedEtcd : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdServer>> server = EtcdServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override { server_.reset(); }
  static std::string Endpoint() { return server_ != nullptr ? server_->endpoint() : "unstarted"; }

 private:
  static std::unique_ptr<EtcdServer> server_;
};
std::unique_ptr<EtcdServer> SharedEtcd::server_;
::testing::Environment* const kSharedEtcd = ::testing::AddGlobalTestEnvironment(new SharedEtcd);

// A prefix no other test (or run) in this process uses.
std::string FreshPrefix(absl::string_view stem) {
  static std::atomic<int> counter{0};
  return absl::StrCat(stem, "-", getpid(), "-", counter++);
}

EtcdStoreOptions Options(absl::string_view prefix) {
  EtcdStoreOptions options;
  options.endpoint = SharedEtcd::Endpoint();
  options.prefix = std::string(prefix);
  return options;
}

class EtcdFixture : public StoreFixture {
 public:
  absl::StatusOr<std::unique_ptr<Store>> NewClient() override {
    ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Connect(Options(prefix_)));
    return std::unique_ptr<Store>(std::move(store));
  }

 private:
  const std::string prefix_ = FreshPrefix("contract");
};

INSTANTIATE_TEST_SUITE_P(Etcd, StoreContractTest,
                         ::testing::Values(StoreContractParam{
                             "etcd", [] { return std::make_unique<EtcdFixture>(); },
                             /*contended_adds=*/100}),
                         StoreContractParamName);

INSTANTIATE_TEST_SUITE_P(Etcd, StoreProcessContractTest,
                         ::testing::Values(StoreContractParam{
                             "etcd", [] { return std::make_unique<EtcdFixture>(); }}),
                         StoreContractParamName);

std::unique_ptr<EtcdStore> MustConnect(const EtcdStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Connect(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// A loopback port nothing listens on (bound, read and released).
int UnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Polls until `key` is gone under `store`; returns how long that took, or InfiniteDuration.
absl::Duration TimeUntilGone(Store& store, const std::string& key, absl::Duration limit) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    if (!store.Check({key}).value_or(true)) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::InfiniteDuration();
}

TEST(EtcdStoreTest, JobsWithDifferentPrefixesAreIsolated) {
  const std::string job = FreshPrefix("job");
  // "job" must not see "job-a"'s keys although one name starts with the other.
  std::unique_ptr<EtcdStore> a = MustConnect(Options(job + "-a"));
  std::unique_ptr<EtcdStore> a2 = MustConnect(Options(job + "-a"));
  std::unique_ptr<EtcdStore> plain = MustConnect(Options(job));
  ASSERT_TRUE(a && a2 && plain);
  ASSERT_TRUE(a->Set("k", "from-a").ok());
  ASSERT_TRUE(a->Set("only-a", "1").ok());
  ASSERT_TRUE(plain->Set("k", "from-plain").ok());
  EXPECT_EQ(a2->Get("k", kLong).value_or("?"), "from-a");
  EXPECT_EQ(plain->Get("k", kLong).value_or("?"), "from-plain");
  EXPECT_EQ(a->NumKeys().value_or(-1), 2);
  EXPECT_EQ(plain->NumKeys().value_or(-1), 1);
  EXPECT_FALSE(plain->Check({"only-a"}).value_or(true));
  absl::Status s = plain->Wait({"only-a"}, absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("/paddle/", job, "/")));
  EXPECT_TRUE(plain->DeleteKey("k").value_or(false));
  EXPECT_EQ(a->Get("k", kLong).value_or("?"), "from-a");
}

TEST(EtcdStoreTest, WaitAndCheckSpanSeveralTransactions) {
  // etcd allows 128 operations per transaction; 300 keys take three.
  std::unique_ptr<EtcdStore> store = MustConnect(Options(FreshPrefix("wide")));
  ASSERT_NE(store, nullptr);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {
    keys.push_back(absl::StrCat("k", i));
    ASSERT_TRUE(store->Set(keys.back(), "").ok());
  }
  EXPECT_TRUE(store->Check(keys).value_or(false));
  EXPECT_TRUE(store->Wait(keys, kLong).ok());
  keys.insert(keys.begin() + 200, "absent");
  EXPECT_FALSE(store->Check(keys).value_or(true));
  absl::Status s = store->Wait(keys, absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("1 of 301 key(s): [absent]"));
}

TEST(EtcdStoreTest, KeysOfACrashedClientExpireWithItsLease) {
  const std::string prefix = FreshPrefix("crash");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::fflush(nullptr);
  // Forked while this process has no store (and so no threads besides gtest's main one).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    EtcdStoreOptions options = Options(prefix);
    options.lease_ttl = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Connect(options);
    char byte = store.ok() && (*store)->Set("worker/0", "alive").ok() ? 'y' : 'n';
    (void)!write(ready[1], &byte, 1);
    pause();  // until the parent kills it: no destructor, no revoke, the keep-alives just stop
    _exit(1);
  }
  close(ready[1]);
  char byte = 0;
  const bool got = read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  std::unique_ptr<EtcdStore> observer = MustConnect(Options(prefix));
  ASSERT_NE(observer, nullptr);
  // While the worker lives, its keep-alives hold the key well past the 2 s TTL.
  bool alive_after_ttl = false;
  if (got && byte == 'y') {
    absl::SleepFor(absl::Seconds(5));
    alive_after_ttl = observer->Check({"worker/0"}).value_or(false);
  }
  ASSERT_TRUE(observer->Set("observer", "stays").ok());
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(got && byte == 'y') << "the worker could not connect and set its key";
  EXPECT_TRUE(alive_after_ttl) << "the worker's key expired while it was alive";
  const absl::Duration gone_after = TimeUntilGone(*observer, "worker/0", absl::Seconds(30));
  EXPECT_LT(gone_after, absl::Seconds(30)) << "a dead worker's key did not expire";
  EXPECT_EQ(observer->Get("observer", kLong).value_or("?"), "stays");
}

// Revokes `lease` through the gateway, as an operator (or a long stall) would end it.
bool RevokeLease(const std::string& endpoint, int64_t lease) {
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://", endpoint, "/v3/lease/revoke");
  const std::string body = absl::StrCat("{\"ID\":\"", lease, "\"}");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char*, size_t size, size_t n, void*) { return size * n; });
  long code = 0;
  const bool ok = curl_easy_perform(curl) == CURLE_OK &&
                  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200;
  curl_easy_cleanup(curl);
  return ok;
}

TEST(EtcdStoreTest, ALostLeaseIsReplacedAndItsKeysAreGone) {
  std::unique_ptr<EtcdStore> store = MustConnect(Options(FreshPrefix("revoke")));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("before", "1").ok());
  const int64_t old_lease = store->lease_id();
  ASSERT_TRUE(RevokeLease(SharedEtcd::Endpoint(), old_lease));
  EXPECT_FALSE(store->Check({"before"}).value_or(true));  // went with the lease
  ASSERT_TRUE(store->Set("after", "2").ok());             // renews the lease, then writes
  EXPECT_NE(store->lease_id(), old_lease);
  EXPECT_EQ(store->Add("counter", 3).value_or(0), 3);
  EXPECT_EQ(store->Get("after", kLong).value_or("?"), "2");
}

TEST(EtcdStoreTest, UnreachableEndpointIsAClearErrorAfterConnectTimeout) {
  EtcdStoreOptions options = Options(FreshPrefix("nowhere"));
  options.endpoint = absl::StrCat("127.0.0.1:", UnusedPort());
  options.connect_timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Connect(options);
  const absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  const std::string message(store.status().message());
  EXPECT_THAT(message, HasSubstr(options.endpoint));
  EXPECT_THAT(message, HasSubstr("grant lease"));
  EXPECT_THAT(message, HasSubstr("connect_timeout"));
  EXPECT_THAT(message, HasSubstr("Couldn't connect"));  // curl's own words
  EXPECT_GE(waited, absl::Milliseconds(900)) << "gave up before connect_timeout";
  EXPECT_LT(waited, absl::Seconds(30));
}

TEST(EtcdStoreTest, ServerLostMidRunIsAClearError) {
  absl::StatusOr<std::unique_ptr<EtcdServer>> server = EtcdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  EtcdStoreOptions options = Options(FreshPrefix("lost"));
  options.endpoint = (*server)->endpoint();
  options.connect_timeout = absl::Seconds(1);
  std::unique_ptr<EtcdStore> store = MustConnect(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("k", "v").ok());
  (*server)->Stop();

  absl::Status set = store->Set("k", "w");
  EXPECT_EQ(set.code(), absl::StatusCode::kUnavailable) << set;
  EXPECT_THAT(std::string(set.message()), HasSubstr(options.endpoint));
  EXPECT_THAT(std::string(set.message()), HasSubstr("set key \"k\""));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> get = store->Get("k", kLong);
  EXPECT_FALSE(get.ok());
  EXPECT_THAT(std::string(get.status().message()), HasSubstr("get key \"k\""));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "Get waited out its timeout on a dead etcd";
  const absl::Time closing = absl::Now();
  store.reset();  // the keep-alive thread must not hold up the close
  EXPECT_LT(absl::Now() - closing, absl::Seconds(5));
}

TEST(EtcdStoreTest, BadOptionsAreRejected) {
  EtcdStoreOptions no_prefix = Options("");
  EXPECT_EQ(EtcdStore::Connect(no_prefix).status().code(), absl::StatusCode::kInvalidArgument);
  EtcdStoreOptions url = Options("job");
  url.endpoint = "http://" + url.endpoint;
  absl::Status s = EtcdStore::Connect(url).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("host:port"));
}

}  // namespace
}  // namespace paddle
