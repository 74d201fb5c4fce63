// Tests of ElasticGroup (paddle/parallel/elastic.h): workers as threads over one store die, leave
// and join while the others train, again and again; the survivors' state stays consistent and
// nothing (threads, file descriptors, /dev/shm segments) is left behind across generations.
#include "paddle/parallel/elastic.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace {

int CountEntries(const std::string& dir, const std::string& containing = "") {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (containing.empty() || name.find(containing) != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}

ElasticOptions Options(std::shared_ptr<Store> store) {
  ElasticOptions o;
  o.store = std::move(store);
  o.min_size = 1;
  o.max_size = 8;
  o.settle = absl::Milliseconds(200);
  o.start_settle = absl::Seconds(2);
  o.join_timeout = absl::Seconds(60);
  o.comm.timeout = absl::Seconds(60);
  o.comm.connect_timeout = absl::Seconds(30);
  return o;
}

// The shared script of one test: which worker should die or leave, when to stop.
struct Script {
  std::shared_ptr<Store> store = std::make_shared<HashStore>();
  std::atomic<int64_t> stop_at{1 << 30};  // all ranks stop after this step
  std::atomic<int64_t> max_step{0};
  std::mutex mu;
  std::vector<std::string> errors;
  void Error(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(e);
  }
};

// One worker. Its model is one number x that grows by the allreduced mean of ones, so x equals
// the step count on every rank exactly when every step was applied once (after rollbacks).
struct Worker {
  std::atomic<bool> die{false};    // drop out abruptly (as SIGKILL would)
  std::atomic<bool> leave{false};  // leave cleanly (as SIGTERM does)
  std::atomic<bool> joined{false};
  std::atomic<bool> finished{false};
  double x = 0, committed_x = 0;
  int64_t step = 0, committed_step = -1;
  int64_t rollbacks = 0;
  std::thread thread;

  void Run(Script* script, int initial_world) {
    std::unique_ptr<ElasticGroup> group = ElasticGroup::Create(Options(script->store)).value();
    int expected = initial_world;
    while (true) {
      absl::StatusOr<Membership> m = group->Join(committed_step, expected);
      if (absl::IsCancelled(m.status())) return;
      if (!m.ok()) return script->Error(absl::StrCat("join: ", m.status().ToString()));
      // Everyone adopts rank 0's commit.
      std::vector<double> state = {committed_x, static_cast<double>(committed_step)};
      Tensor t = Tensor::FromBlob(state.data(), {2}, DType::kFloat64, Device::Cpu()).value();
      absl::Status st = group->comm()->Broadcast(t, 0)->Wait();
      if (!st.ok()) {
        group->Leave(st);
        expected = 0;
        continue;
      }
      if (state[1] >= 0 && (state[1] != step || state[0] != x)) ++rollbacks;
      committed_x = x = state[0];
      committed_step = step = std::max<int64_t>(0, static_cast<int64_t>(state[1]));
      joined = true;
      int size = group->size();
      bool changed = false;
      while (!changed) {
        if (die) return group->Leave(absl::AbortedError("simulated death"));
        if (step >= script->stop_at) {
          if (group->rank() == 0) (void)group->MarkDone();
          finished = true;
          return;
        }
        Tensor one = Tensor::Zeros({1}, DType::kFloat64).value();
        one.data<double>()[0] = 1;
        st = group->comm()->Allreduce(one, ReduceOp::kAvg)->Wait();
        absl::StatusOr<MembershipChange> change =
            st.ok() ? group->AgreeOnChange(leave) : absl::StatusOr<MembershipChange>(st);
        if (!change.ok()) {  // a peer failed: roll back, the next generation
          group->Leave(change.status());
          x = committed_x;
          step = committed_step;
          expected = size - 1;
          changed = true;
          continue;
        }
        x += one.data<double>()[0];
        ++step;
        int64_t seen = script->max_step.load();
        while (seen < step && !script->max_step.compare_exchange_weak(seen, step)) {
        }
        if (step % 3 == 0 || change->any()) committed_x = x, committed_step = step;
        if (change->any()) {
          for (int r : change->leavers) {
            if (r == group->rank()) return group->Leave();
          }
          expected = size - static_cast<int>(change->leavers.size()) + change->joiners;
          changed = true;
        }
        absl::SleepFor(absl::Milliseconds(2));
      }
    }
  }
};

TEST(ElasticGroupTest, TwentyMembershipChangesLeaveNothingBehind) {
  const int threads_before = CountEntries("/proc/self/task");
  const int fds_before = CountEntries("/proc/self/fd");
  // This process's segments only: /dev/shm is shared with tests running beside this one, whose
  // processes may have the same pid in PID namespaces of their own (shm_segment.h's names).
  struct stat ns;
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  const std::string shm_mark = absl::StrCat("paddle-", ns.st_ino, "-", getpid(), "-");
  const int shm_before = CountEntries("/dev/shm", shm_mark);
  Script script;
  constexpr int kWorld = 3;
  std::vector<std::unique_ptr<Worker>> workers;
  auto start = [&](int initial_world) {
    workers.push_back(std::make_unique<Worker>());
    Worker* w = workers.back().get();
    w->thread = std::thread([w, &script, initial_world] { w->Run(&script, initial_world); });
    return w;
  };
  for (int i = 0; i < kWorld; ++i) start(kWorld);
  auto wait_for = [&](auto pred, const char* what) {
    absl::Time limit = absl::Now() + absl::Seconds(60);
    while (!pred()) {
      ASSERT_LT(absl::Now(), limit) << "timed out waiting for " << what;
      ASSERT_TRUE(script.errors.empty()) << script.errors[0];
      absl::SleepFor(absl::Milliseconds(5));
    }
  };
  wait_for([&] { return script.max_step.load() >= 5; }, "the first steps");
  const int64_t keys_one_generation = script.store->NumKeys().value();
  // 10 rounds of (one worker dies or leaves, a new one joins): 20 membership changes.
  int deaths = 0;
  for (int round = 0; round < 10; ++round) {
    std::vector<Worker*> alive;
    for (auto& w : workers) {
      if (w->joined && !w->die && !w->leave) alive.push_back(w.get());
    }
    ASSERT_EQ(alive.size(), kWorld) << "round " << round;
    Worker* victim = alive[round % alive.size()];
    int64_t at = script.max_step.load();
    if (round % 2 == 0) {
      victim->die = true;
      ++deaths;
    } else {
      victim->leave = true;
    }
    victim->thread.join();
    wait_for([&] { return script.max_step.load() >= at + 4; }, "progress without the victim");
    Worker* newcomer = start(0);
    wait_for([&] { return newcomer->joined.load(); }, "the newcomer to join");
    wait_for([&] { return script.max_step.load() >= at + 10; }, "progress with the newcomer");
  }
  script.stop_at = script.max_step.load() + 20;
  for (auto& w : workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  ASSERT_TRUE(script.errors.empty()) << script.errors[0];
  int finished = 0;
  for (auto& w : workers) {
    if (!w->finished) continue;
    ++finished;
    // Every step was applied exactly once in the history that survived.
    EXPECT_EQ(w->x, static_cast<double>(w->step));
    EXPECT_EQ(w->step, script.stop_at.load());
  }
  EXPECT_EQ(finished, kWorld);
  EXPECT_EQ(CountEntries("/proc/self/task"), threads_before);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds_before);
  EXPECT_EQ(CountEntries("/dev/shm", shm_mark), shm_before);
  EXPECT_EQ(deaths, 5);
  // Old generations' keys are deleted: what stays is the last two generations' and those of the
  // members that left or died (each keeps its last two); without the cleanup every one of the
  // 20+ generations would leave about keys_one_generation keys.
  const int64_t keys_end = script.store->NumKeys().value();
  std::printf("store keys: %lld after the first generation, %lld after 20 changes\n",
              static_cast<long long>(keys_one_generation), static_cast<long long>(keys_end));
  EXPECT_LE(keys_end, 8 * keys_one_generation);
}

TEST(ElasticGroupTest, JoinTimesOutNamingWhatIsMissing) {
  ElasticOptions o = Options(std::make_shared<HashStore>());
  o.min_size = 2;
  o.join_timeout = absl::Milliseconds(300);
  std::unique_ptr<ElasticGroup> group = ElasticGroup::Create(o).value();
  absl::StatusOr<Membership> m = group->Join(/*commit_step=*/5, /*expected=*/0);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded) << m.status();
  EXPECT_NE(m.status().message().find("1 worker(s) arrived, min_size 2"), std::string::npos)
      << m.status();
}

// A lone survivor that expects only itself (its peer died) still waits for min_size: a group
// below the minimum must not form and train, or take data tasks, on its own.
TEST(ElasticGroupTest, ExpectedBelowMinSizeDoesNotFormAGroup) {
  ElasticOptions o = Options(std::make_shared<HashStore>());
  o.min_size = 2;
  o.join_timeout = absl::Milliseconds(300);
  std::unique_ptr<ElasticGroup> group = ElasticGroup::Create(o).value();
  absl::StatusOr<Membership> m = group->Join(/*commit_step=*/5, /*expected=*/1);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded) << m.status();
  EXPECT_NE(m.status().message().find("1 worker(s) arrived, min_size 2"), std::string::npos)
      << m.status();
}

TEST(ElasticGroupTest, JoinAfterTheJobFinishedIsCancelled) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<ElasticGroup> a = ElasticGroup::Create(Options(store)).value();
  ASSERT_TRUE(a->MarkDone().ok());
  std::unique_ptr<ElasticGroup> b = ElasticGroup::Create(Options(store)).value();
  EXPECT_TRUE(absl::IsCancelled(b->Join(-1, 0).status()));
}

TEST(ElasticGroupTest, BadOptionsAreErrors) {
  ElasticOptions o;
  EXPECT_EQ(ElasticGroup::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.store = std::make_shared<HashStore>();
  o.min_size = 3;
  o.max_size = 2;
  absl::Status s = ElasticGroup::Create(o).status();
  EXPECT_NE(s.message().find("min_size 3, max_size 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace paddle
