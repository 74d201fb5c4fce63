// The Store contract suite; see store_contract.h. Success paths use generous timeouts so a loaded
// 2-core machine does not make them flaky; only tests that expect a timeout use short ones.
#include "tests/collective/store/store_contract.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "paddle/collective/store/prefix_store.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Duration kLong = absl::Seconds(60);         // success paths
const absl::Duration kShort = absl::Milliseconds(300);  // paths expected to time out

std::vector<std::string> Keys(absl::string_view stem, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat(stem, i));
  return keys;
}

}  // namespace

void StoreContractTest::SetUp() {
  fixture_ = GetParam().make_fixture();
  ASSERT_NE(fixture_, nullptr);
  store_ = NewClient();
  ASSERT_NE(store_, nullptr);
}

void StoreContractTest::TearDown() {
  store_.reset();  // clients go before the backing store
  fixture_.reset();
}

std::unique_ptr<Store> StoreContractTest::NewClient() {
  absl::StatusOr<std::unique_ptr<Store>> client = fixture_->NewClient();
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(client).value() : nullptr;
}

std::string StoreContractParamName(const ::testing::TestParamInfo<StoreContractParam>& info) {
  return info.param.name;
}

TEST_P(StoreContractTest, SetGetKeepsEveryByte) {
  const std::string binary("a\0b\xff\n\0", 6);
  const std::string big(1 << 20, 'x');
  std::string patterned(1 << 20, '\0');
  for (size_t i = 0; i < patterned.size(); ++i) patterned[i] = static_cast<char>(i * 131 + 7);

  ASSERT_TRUE(store_->Set("binary", binary).ok());
  ASSERT_TRUE(store_->Set("empty", "").ok());
  ASSERT_TRUE(store_->Set("big", big).ok());
  ASSERT_TRUE(store_->Set("patterned", patterned).ok());
  ASSERT_TRUE(store_->Set(std::string("key\0with nul", 12), "nul-key").ok());

  std::unique_ptr<Store> other = NewClient();
  ASSERT_NE(other, nullptr);
  for (Store* s : {store_.get(), other.get()}) {
    EXPECT_EQ(s->Get("binary", kLong).value_or("?"), binary);
    EXPECT_EQ(s->Get("empty", kLong).value_or("?"), "");
    EXPECT_EQ(s->Get("big", kLong).value_or("?"), big);
    EXPECT_EQ(s->Get("patterned", kLong).value_or("?"), patterned);
    EXPECT_EQ(s->Get(std::string("key\0with nul", 12), kLong).value_or("?"), "nul-key");
  }
  // Set replaces.
  ASSERT_TRUE(other->Set("binary", "second").ok());
  EXPECT_EQ(store_->Get("binary", kLong).value_or("?"), "second");
}

TEST_P(StoreContractTest, GetOfMissingKeyTimesOutNamingTheKey) {
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = store_->Get("never-set-key", kShort);
  absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_THAT(std::string(value.status().message()), HasSubstr("never-set-key"));
  EXPECT_GE(waited, kShort - absl::Milliseconds(5));
  EXPECT_LT(waited, absl::Seconds(20));
}

TEST_P(StoreContractTest, ConcurrentAddsAreExact) {
  constexpr int kThreads = 8;
  const int adds = GetParam().contended_adds;
  std::vector<std::unique_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(NewClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < adds; ++i) {
        absl::StatusOr<int64_t> v = clients[t]->Add("counter", 1);
        if (!v.ok()) {
          ++errors;
          return;
        }
        seen[t].push_back(*v);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors.load(), 0);
  // Every Add returned a distinct value: together they are exactly 1..N.
  std::vector<int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * adds);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
  EXPECT_EQ(store_->Get("counter", kLong).value_or("?"), absl::StrCat(kThreads * adds));
  EXPECT_EQ(store_->Add("counter", -kThreads * adds - 5).value_or(0), -5);
  EXPECT_EQ(store_->Add("fresh-counter", 7).value_or(0), 7);
}

TEST_P(StoreContractTest, AddOnNonIntegerIsInvalidArgument) {
  ASSERT_TRUE(store_->Set("text", "abc").ok());
  absl::StatusOr<int64_t> v = store_->Add("text", 1);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("text"));
  EXPECT_EQ(store_->Get("text", kLong).value_or("?"), "abc");
}

TEST_P(StoreContractTest, CompareSet) {
  // Missing key, non-empty expected: nothing is created.
  EXPECT_EQ(store_->CompareSet("cas", "x", "y").value_or("?"), "");
  EXPECT_FALSE(store_->Check({"cas"}).value_or(true));
  // Missing key, empty expected: created.
  EXPECT_EQ(store_->CompareSet("cas", "", "first").value_or("?"), "first");
  // Wrong expected: unchanged, current value returned.
  EXPECT_EQ(store_->CompareSet("cas", "wrong", "second").value_or("?"), "first");
  EXPECT_EQ(store_->Get("cas", kLong).value_or("?"), "first");
  // Right expected: swapped.
  EXPECT_EQ(store_->CompareSet("cas", "first", "second").value_or("?"), "second");
  EXPECT_EQ(store_->Get("cas", kLong).value_or("?"), "second");
}

TEST_P(StoreContractTest, CompareSetHasExactlyOneWinner) {
  constexpr int kThreads = 8;
  std::vector<std::string> result(kThreads);
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(NewClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      result[t] = clients[t]->CompareSet("race", "", absl::StrCat("t", t)).value_or("error");
    });
  }
  for (std::thread& t : threads) t.join();
  int winners = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(result[t], result[0]);
    winners += result[t] == absl::StrCat("t", t);
  }
  EXPECT_EQ(winners, 1);
}

TEST_P(StoreContractTest, WaitBlocksUntilAnotherClientSets) {
  std::unique_ptr<Store> setter = NewClient();
  ASSERT_NE(setter, nullptr);
  std::atomic<bool> set_started{false};
  absl::Status waited;
  bool saw_set_started = false;
  std::thread waiter([&] {
    waited = store_->Wait({"w1", "w2"}, kLong);
    saw_set_started = set_started.load();
  });
  ASSERT_TRUE(setter->Set("w1", "1").ok());
  absl::SleepFor(absl::Milliseconds(50));  // lets the waiter block; the checks hold either way
  set_started = true;
  ASSERT_TRUE(setter->Set("w2", "2").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_TRUE(saw_set_started) << "Wait returned before the last key was set";
  EXPECT_TRUE(store_->Wait({}, kShort).ok());
}

TEST_P(StoreContractTest, WaitTimesOutListingExactlyTheMissingKeys) {
  ASSERT_TRUE(store_->Set("present-a", "1").ok());
  ASSERT_TRUE(store_->Set("present-b", "1").ok());
  absl::Status s = store_->Wait({"present-a", "absent-x", "present-b", "absent-y"}, kShort);
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  std::string message(s.message());
  EXPECT_THAT(message, HasSubstr("absent-x"));
  EXPECT_THAT(message, HasSubstr("absent-y"));
  EXPECT_THAT(message, Not(HasSubstr("present-a")));
  EXPECT_THAT(message, Not(HasSubstr("present-b")));
  EXPECT_THAT(message, HasSubstr("2 of 4"));
}

TEST_P(StoreContractTest, Check) {
  EXPECT_FALSE(store_->Check({"c1"}).value_or(true));
  ASSERT_TRUE(store_->Set("c1", "").ok());
  EXPECT_TRUE(store_->Check({"c1"}).value_or(false));
  EXPECT_FALSE(store_->Check({"c1", "c2"}).value_or(true));
  ASSERT_TRUE(store_->Set("c2", "v").ok());
  EXPECT_TRUE(store_->Check({"c1", "c2"}).value_or(false));
  EXPECT_TRUE(store_->Check({}).value_or(false));
}

TEST_P(StoreContractTest, DeleteKey) {
  ASSERT_TRUE(store_->Set("doomed", "v").ok());
  EXPECT_TRUE(store_->DeleteKey("doomed").value_or(false));
  EXPECT_FALSE(store_->DeleteKey("doomed").value_or(true));
  EXPECT_FALSE(store_->Check({"doomed"}).value_or(true));
  EXPECT_EQ(store_->Get("doomed", kShort).status().code(), absl::StatusCode::kDeadlineExceeded);
  // A deleted key can be created again, and Add restarts from 0.
  ASSERT_TRUE(store_->Set("doomed", "again").ok());
  EXPECT_EQ(store_->Get("doomed", kLong).value_or("?"), "again");
  ASSERT_TRUE(store_->Add("doomed-counter", 5).ok());
  ASSERT_TRUE(store_->DeleteKey("doomed-counter").value_or(false));
  EXPECT_EQ(store_->Add("doomed-counter", 1).value_or(0), 1);
}

TEST_P(StoreContractTest, NumKeys) {
  absl::StatusOr<int64_t> before = store_->NumKeys();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(store_->Set("n1", "v").ok());
  ASSERT_TRUE(store_->Set("n2", "v").ok());
  ASSERT_TRUE(store_->Set("n2", "replaced").ok());
  ASSERT_TRUE(store_->Add("n3", 1).ok());
  EXPECT_EQ(store_->NumKeys().value_or(-1), *before + 3);
  ASSERT_TRUE(store_->DeleteKey("n1").value_or(false));
  EXPECT_EQ(store_->NumKeys().value_or(-1), *before + 2);
}

TEST_P(StoreContractTest, PrefixStoresAreIsolated) {
  std::shared_ptr<Store> base = NewClient();
  ASSERT_NE(base, nullptr);
  PrefixStore a("job-a", base);
  PrefixStore b("job-b", base);
  ASSERT_TRUE(a.Set("k", "from-a").ok());
  ASSERT_TRUE(b.Set("k", "from-b").ok());
  ASSERT_TRUE(a.Set("only-a", "1").ok());
  ASSERT_TRUE(a.Set("only-a", "2").ok());  // a replaced key counts once
  EXPECT_EQ(a.Get("k", kLong).value_or("?"), "from-a");
  EXPECT_EQ(b.Get("k", kLong).value_or("?"), "from-b");
  EXPECT_EQ(base->Get("job-a/k", kLong).value_or("?"), "from-a");
  EXPECT_FALSE(b.Check({"only-a"}).value_or(true));
  absl::Status s = b.Wait({"only-a"}, kShort);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("only-a"));

  EXPECT_EQ(a.NumKeys().value_or(-1), 2);
  EXPECT_EQ(b.NumKeys().value_or(-1), 1);
  EXPECT_EQ(b.Add("n", 3).value_or(0), 3);
  EXPECT_EQ(b.CompareSet("cas", "", "x").value_or("?"), "x");
  EXPECT_EQ(b.NumKeys().value_or(-1), 3);
  EXPECT_TRUE(a.DeleteKey("k").value_or(false));
  EXPECT_FALSE(a.DeleteKey("k").value_or(true));
  EXPECT_EQ(a.NumKeys().value_or(-1), 1);
  EXPECT_EQ(b.Get("k", kLong).value_or("?"), "from-b");
  // A second client of the same prefix sees the same keys and count.
  std::shared_ptr<Store> other_base = NewClient();
  ASSERT_NE(other_base, nullptr);
  PrefixStore a2("job-a", other_base);
  EXPECT_EQ(a2.Get("only-a", kLong).value_or("?"), "2");
  EXPECT_EQ(a2.NumKeys().value_or(-1), 1);
}

TEST_P(StoreContractTest, ManyThreadsAtOnce) {
  constexpr int kThreads = 16;
  constexpr int kAddsPerThread = 50;
  const std::vector<std::string> keys = Keys("many/", kThreads);
  std::vector<std::unique_ptr<Store>> own(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    own[t] = NewClient();
    ASSERT_NE(own[t], nullptr);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share store_, half use their own client.
      Store& s = t % 2 == 0 ? *store_ : *own[t];
      bool ok = s.Set(keys[t], absl::StrCat("v", t)).ok();
      for (int i = 0; i < kAddsPerThread && ok; ++i) ok = s.Add("many-counter", 1).ok();
      ok = ok && s.Wait(keys, kLong).ok();
      for (int j = 0; j < kThreads && ok; ++j) {
        ok = s.Get(keys[j], kLong).value_or("?") == absl::StrCat("v", j);
      }
      if (!ok) ++failures;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->Get("many-counter", kLong).value_or("?"),
            absl::StrCat(kThreads * kAddsPerThread));
}

namespace {

constexpr int kProcesses = 8;
constexpr int kProcessAdds = 50;

// What one forked child does; returns its exit code (0 = success, else the failing step).
int ChildMain(StoreFixture& fixture, int index) {
  auto fail = [index](int code, const absl::Status& s) {
    std::fprintf(stderr, "child %d failed at step %d: %s\n", index, code, s.ToString().c_str());
    return code;
  };
  absl::StatusOr<std::unique_ptr<Store>> client = fixture.NewClient();
  if (!client.ok()) return fail(10, client.status());
  Store& s = **client;
  for (int i = 0; i < kProcessAdds; ++i) {
    absl::Status st = s.Add("proc/counter", 1).status();
    if (!st.ok()) return fail(11, st);
  }
  absl::Status st =
      s.Set(absl::StrCat("proc/key/", index), std::string("val\0", 4) + char('a' + index));
  if (!st.ok()) return fail(12, st);
  std::vector<std::string> keys = Keys("proc/key/", kProcesses);
  st = s.Wait(keys, kLong);
  if (!st.ok()) return fail(13, st);
  for (int j = 0; j < kProcesses; ++j) {
    absl::StatusOr<std::string> v = s.Get(keys[j], kLong);
    if (!v.ok()) return fail(14, v.status());
    if (*v != std::string("val\0", 4) + char('a' + j)) return fail(15, absl::InternalError(*v));
  }
  absl::StatusOr<std::string> winner = s.CompareSet("proc/winner", "", absl::StrCat(index));
  if (!winner.ok()) return fail(16, winner.status());
  st = s.Set(absl::StrCat("proc/saw-winner/", index), *winner);
  if (!st.ok()) return fail(17, st);
  client->reset();  // close cleanly (a FileStore counts its users on close)
  return 0;
}

}  // namespace

// In-process stores (HashStore) do not instantiate the multi-process suite.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(StoreProcessContractTest);

TEST_P(StoreProcessContractTest, ForkedProcessesShareTheStore) {
  std::fflush(nullptr);  // children must not re-flush the parent's buffered output
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(ChildMain(*fixture_, i));
    ASSERT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  // Reap with a deadline; a hung child is killed and reported rather than hanging the test.
  std::vector<int> codes(kProcesses, -1);
  int left = kProcesses;
  absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (left > 0 && absl::Now() < deadline) {
    for (int i = 0; i < kProcesses; ++i) {
      int status = 0;
      if (codes[i] != -1 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
      --left;
    }
    if (left > 0) absl::SleepFor(absl::Milliseconds(5));
  }
  for (int i = 0; i < kProcesses; ++i) {
    if (codes[i] != -1) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
    ADD_FAILURE() << "child " << i << " did not finish within 120s";
  }
  for (int i = 0; i < kProcesses; ++i) EXPECT_EQ(codes[i], 0) << "child " << i;

  EXPECT_EQ(store_->Get("proc/counter", kLong).value_or("?"),
            absl::StrCat(kProcesses * kProcessAdds));
  std::string winner = store_->Get("proc/winner", kLong).value_or("?");
  for (int i = 0; i < kProcesses; ++i) {
    EXPECT_EQ(store_->Get(absl::StrCat("proc/saw-winner/", i), kLong).value_or("?"), winner);
  }
}

}  // namespace paddle
