// TaskMaster over every store (in-process HashStore, a real TCPStore server, a real etcd): every
// task exactly once per epoch with concurrent workers (one task per Ask, or leases with folded
// finishes), a worker dying with a lease, the per-epoch shuffle, timeouts taken from
// observed task time (fake clock), late and stale reports ignored, repeated failures set aside,
// a worker joining an existing state, and a state made for another task list refused.
#include "paddle/data/task_master.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/etcd_store.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/testing/etcd_server.h"

namespace paddle {
namespace data {
namespace {

// One store server per test; Client() gives each simulated worker its own connection.
class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  virtual std::unique_ptr<Store> Client() = 0;
};

class HashEnv : public StoreEnv {
 public:
  // Workers of one process share the HashStore itself, so clients are thin forwarders.
  class Forward : public Store {
   public:
    explicit Forward(Store* s) : s_(s) {}
    absl::Status Set(absl::string_view k, absl::string_view v) override { return s_->Set(k, v); }
    absl::StatusOr<std::string> Get(absl::string_view k, absl::Duration t) override {
      return s_->Get(k, t);
    }
    absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override { return s_->Add(k, d); }
    absl::StatusOr<std::string> CompareSet(absl::string_view k, absl::string_view e,
                                           absl::string_view d) override {
      return s_->CompareSet(k, e, d);
    }
    absl::Status Wait(absl::Span<const std::string> k, absl::Duration t) override {
      return s_->Wait(k, t);
    }
    absl::StatusOr<bool> Check(absl::Span<const std::string> k) override { return s_->Check(k); }
    absl::StatusOr<bool> DeleteKey(absl::string_view k) override { return s_->DeleteKey(k); }
    absl::StatusOr<int64_t> NumKeys() override { return s_->NumKeys(); }
    std::string Describe() const override { return s_->Describe(); }

   private:
    Store* s_;
  };
  std::unique_ptr<Store> Client() override { return std::make_unique<Forward>(&store_); }

 private:
  HashStore store_;
};

class TcpEnv : public StoreEnv {
 public:
  TcpEnv() {
    auto server = TcpStoreServer::Start(TcpStoreServerOptions());
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) server_ = std::move(*server);
  }
  std::unique_ptr<Store> Client() override {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.timeout = absl::Seconds(30);
    o.connect_timeout = absl::Seconds(30);
    auto c = TcpStore::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::unique_ptr<Store>(std::move(*c)) : nullptr;
  }

 private:
  std::unique_ptr<TcpStoreServer> server_;
};

class EtcdEnv : public StoreEnv {
 public:
  EtcdEnv() {
    auto server = EtcdServer::Start();
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) server_ = std::move(*server);
  }
  std::unique_ptr<Store> Client() override {
    EtcdStoreOptions o;
    o.endpoint = server_->endpoint();
    o.prefix = "task-master-test";
    o.timeout = absl::Seconds(30);
    auto c = EtcdStore::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::unique_ptr<Store>(std::move(*c)) : nullptr;
  }

 private:
  std::unique_ptr<EtcdServer> server_;
};

struct FakeClock {
  std::atomic<int64_t> us{1'700'000'000'000'000};
  std::function<absl::Time()> fn() {
    return [this] { return absl::FromUnixMicros(us.load()); };
  }
  void Advance(absl::Duration d) { us += absl::ToInt64Microseconds(d); }
};

std::vector<TaskRange> Tasks(int n) {
  std::vector<int64_t> counts(static_cast<size_t>(n), 10);
  return *MakeTasks(counts, 10);
}

class TaskMasterTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "hash") env_ = std::make_unique<HashEnv>();
    if (GetParam() == "tcp") env_ = std::make_unique<TcpEnv>();
    if (GetParam() == "etcd") env_ = std::make_unique<EtcdEnv>();
    options_.clock = clock_.fn();
    options_.seed = 7;
    options_.initial_timeout = absl::Seconds(100);
    options_.min_timeout = absl::Seconds(1);
  }
  std::unique_ptr<TaskMaster> Master(Store* store, std::vector<TaskRange> tasks) {
    auto m = TaskMaster::Create(store, std::move(tasks), options_);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  Task AskTask(TaskMaster& m, int64_t epoch, const std::string& worker) {
    absl::StatusOr<TaskAnswer> a = m.Ask(epoch, worker);
    EXPECT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(a.ok() && a->kind == TaskAnswer::kTask);
    return a.ok() ? a->task : Task();
  }
  // Runs `body(w, master)` on `workers` threads, each with a store client and a task master of
  // its own over `tasks` tasks; returns the errors the bodies count, plus one per master that
  // could not be created.
  int RunWorkers(int workers, int tasks, const std::function<int(int, TaskMaster&)>& body) {
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        std::unique_ptr<Store> store = env_->Client();
        std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(tasks));
        errors += m == nullptr ? 1 : body(w, *m);
      });
    }
    for (std::thread& t : threads) t.join();
    return errors.load();
  }

  std::unique_ptr<StoreEnv> env_;
  FakeClock clock_;
  TaskMasterOptions options_;
};

TEST_P(TaskMasterTest, ConcurrentWorkersTakeEveryTaskOncePerEpoch) {
  const int kTasks = 24, kWorkers = 3, kEpochs = 3;
  std::mutex mu;
  std::map<int64_t, std::vector<int64_t>> order;  // epoch -> task ids in the order handed out
  const int errors = RunWorkers(kWorkers, kTasks, [&](int w, TaskMaster& m) {
    int errors = 0;
    for (int64_t epoch = 0; epoch < kEpochs;) {
      absl::StatusOr<TaskAnswer> a = m.Ask(epoch, absl::StrCat("w", w));
      if (!a.ok()) return errors + 1;
      if (a->kind == TaskAnswer::kEpochDone) {
        ++epoch;
      } else if (a->kind == TaskAnswer::kWait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      } else {
        EXPECT_EQ(a->task.epoch, epoch);
        {
          std::lock_guard<std::mutex> lock(mu);
          order[epoch].push_back(a->task.id);
        }
        absl::StatusOr<std::vector<bool>> f = m.Finish({a->task});
        if (!f.ok() || !(*f)[0]) ++errors;
      }
    }
    return errors;
  });
  ASSERT_EQ(errors, 0);
  for (int64_t e = 0; e < kEpochs; ++e) {
    std::set<int64_t> distinct(order[e].begin(), order[e].end());
    EXPECT_EQ(order[e].size(), static_cast<size_t>(kTasks)) << "epoch " << e;
    EXPECT_EQ(distinct.size(), static_cast<size_t>(kTasks)) << "epoch " << e;
  }
  EXPECT_NE(order[0], order[1]);  // reshuffled by (seed, epoch)
}

// Workers leasing several tasks per Ask and finishing them in their next Ask: still every task
// finished exactly once per epoch.
TEST_P(TaskMasterTest, ConcurrentLeasesWithFoldedFinishesTakeEveryTaskOnce) {
  const int kTasks = 24, kWorkers = 3, kEpochs = 3;
  std::mutex mu;
  std::map<int64_t, std::map<int64_t, int>> finished;  // epoch -> task id -> accepted finishes
  const int errors = RunWorkers(kWorkers, kTasks, [&](int w, TaskMaster& m) {
    int errors = 0;
    std::vector<Task> mine;  // read, to be finished by the next Ask
    AskOptions o;
    o.max_tasks = 3;
    o.ways = kWorkers;
    for (int64_t epoch = 0; epoch < kEpochs;) {
      o.finish = mine;
      absl::StatusOr<TaskAnswer> a = m.Ask(epoch, absl::StrCat("w", w), o);
      if (!a.ok() || a->finished.size() != mine.size()) return errors + 1;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (size_t i = 0; i < mine.size(); ++i)
          finished[mine[i].epoch][mine[i].id] += a->finished[i];
      }
      mine.clear();
      if (a->kind == TaskAnswer::kEpochDone) {
        ++epoch;
      } else if (a->kind == TaskAnswer::kWait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      } else {
        mine.push_back(a->task);
        mine.insert(mine.end(), a->more.begin(), a->more.end());
        if (mine.size() > 3) ++errors;
      }
    }
    return errors;
  });
  ASSERT_EQ(errors, 0);
  for (int64_t e = 0; e < kEpochs; ++e) {
    ASSERT_EQ(finished[e].size(), static_cast<size_t>(kTasks)) << "epoch " << e;
    for (const auto& [id, n] : finished[e]) EXPECT_EQ(n, 1) << "epoch " << e << " task " << id;
  }
}

TEST_P(TaskMasterTest, LeaseIsSeveralHandOutsInOneTransition) {
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(7));
  const int64_t before = m->GetState()->version;
  AskOptions lease;
  lease.max_tasks = 3;
  absl::StatusOr<TaskAnswer> a = m->Ask(0, "w", lease);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->kind, TaskAnswer::kTask);
  ASSERT_EQ(a->more.size(), 2u);
  EXPECT_TRUE(a->finished.empty());
  EXPECT_EQ(m->GetState()->version, before + 1);
  // Three hand-outs of their own, in the epoch's order; the i-th is due i + 1 timeouts from now.
  const std::vector<Task> got = {a->task, a->more[0], a->more[1]};
  HashStore other;
  std::unique_ptr<TaskMaster> ref = Master(&other, Tasks(7));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, AskTask(*ref, 0, "r").id) << i;
    EXPECT_EQ(got[i].range, m->tasks()[static_cast<size_t>(got[i].id)]);
    EXPECT_EQ(got[i].deadline, clock_.fn()() + absl::Seconds(100) * static_cast<int64_t>(i + 1));
    if (i > 0) {
      EXPECT_GT(got[i].generation, got[i - 1].generation);
    }
  }
  EXPECT_EQ(m->GetState()->pending.size(), 3u);
  // Near the epoch's end a lease shrinks to todo / ways, at least one: 4 left -> 2, 2 -> 1, 1 -> 1.
  lease.ways = 2;
  for (size_t expected : {2u, 1u, 1u}) {
    a = m->Ask(0, "w", lease);
    ASSERT_TRUE(a.ok() && a->kind == TaskAnswer::kTask);
    EXPECT_EQ(1 + a->more.size(), expected);
  }
  a = m->Ask(0, "w", lease);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, TaskAnswer::kWait);
  lease.max_tasks = 0;
  EXPECT_EQ(m->Ask(0, "w", lease).status().code(), absl::StatusCode::kInvalidArgument);
  lease.max_tasks = 1;
  lease.ways = 0;
  EXPECT_EQ(m->Ask(0, "w", lease).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(TaskMasterTest, FinishFoldedIntoAskIsOneTransition) {
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(3));
  Task t = AskTask(*m, 0, "w");
  clock_.Advance(absl::Seconds(2));
  Task stale = t;
  stale.generation += 100;
  std::vector<Task> finish = {t, stale};
  AskOptions o;
  o.finish = finish;
  int64_t before = m->GetState()->version;
  absl::StatusOr<TaskAnswer> a = m->Ask(0, "w", o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->kind, TaskAnswer::kTask);
  EXPECT_EQ(a->finished, (std::vector<bool>{true, false}));
  EXPECT_EQ(m->GetState()->version, before + 1);
  EXPECT_EQ(m->GetState()->done, std::vector<int64_t>{t.id});
  // The finish came first: its duration (2 s) already sets the new hand-out's timeout.
  EXPECT_EQ(a->task.deadline, clock_.fn()() + absl::Seconds(6));
  // Finishing the epoch's last tasks through an Ask ends the epoch in the same transition.
  finish = {a->task, AskTask(*m, 0, "w")};
  o.finish = finish;
  before = m->GetState()->version;
  a = m->Ask(0, "w", o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, TaskAnswer::kEpochDone);
  EXPECT_EQ(a->finished, (std::vector<bool>{true, true}));
  absl::StatusOr<TaskMasterState> st = m->GetState();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->version, before + 1);
  EXPECT_EQ(st->epoch, 1);
  EXPECT_EQ(st->todo.size(), 3u);
  // An Ask ahead of the job is an error and finishes nothing.
  finish = {AskTask(*m, 1, "w")};
  o.finish = finish;
  EXPECT_EQ(m->Ask(3, "w", o).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->GetState()->pending, std::vector<int64_t>{finish[0].id});
}

// A worker that dies holding a lease: each of its tasks is handed out again (after its timeout,
// or adopted through a commit that named it), none is lost and none is finished twice.
TEST_P(TaskMasterTest, WorkerDyingWithALeaseLosesAndRepeatsNothing) {
  const int kTasks = 9;
  std::unique_ptr<Store> sa = env_->Client(), sb = env_->Client();
  std::unique_ptr<TaskMaster> b = Master(sb.get(), Tasks(kTasks));
  std::map<int64_t, std::map<int64_t, int>> finished;  // epoch -> task id -> accepted finishes
  auto count = [&](const std::vector<Task>& tasks, const std::vector<bool>& accepted) {
    ASSERT_EQ(tasks.size(), accepted.size());
    for (size_t i = 0; i < tasks.size(); ++i) finished[tasks[i].epoch][tasks[i].id] += accepted[i];
  };
  auto lease_of = [](const TaskAnswer& a) {
    std::vector<Task> l = {a.task};
    l.insert(l.end(), a.more.begin(), a.more.end());
    return l;
  };
  // b reads the epoch to its end, finishing `mine` and each lease in its next Ask; returns the ids
  // it was handed.
  auto drain = [&](int64_t epoch, std::vector<Task> mine) {
    std::set<int64_t> handed;
    AskOptions o;
    o.max_tasks = 3;
    while (true) {
      o.finish = mine;
      absl::StatusOr<TaskAnswer> ans = b->Ask(epoch, "b", o);
      EXPECT_TRUE(ans.ok()) << ans.status();
      if (!ans.ok()) return handed;
      count(mine, ans->finished);
      mine.clear();
      if (ans->kind == TaskAnswer::kEpochDone) return handed;
      if (ans->kind == TaskAnswer::kWait) {  // only the dead worker's tasks are pending
        clock_.Advance(ans->retry_after + absl::Microseconds(1));
        continue;
      }
      mine = lease_of(*ans);
      for (const Task& t : mine) handed.insert(t.id);
      clock_.Advance(absl::Seconds(1));  // reading them
    }
  };
  AskOptions lease;
  lease.max_tasks = 3;
  // Epoch 0: a leases 3, finishes the first in the Ask of its next lease, and dies holding 5.
  std::unique_ptr<TaskMaster> a = Master(sa.get(), Tasks(kTasks));
  absl::StatusOr<TaskAnswer> first = a->Ask(0, "a", lease);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<Task> read = {first->task};
  lease.finish = read;
  absl::StatusOr<TaskAnswer> second = a->Ask(0, "a", lease);
  ASSERT_TRUE(second.ok()) << second.status();
  count(read, second->finished);
  std::set<int64_t> lost;
  for (const Task& t : first->more) lost.insert(t.id);
  for (const Task& t : lease_of(*second)) lost.insert(t.id);
  ASSERT_EQ(lost.size(), 5u);
  a.reset();
  std::set<int64_t> handed = drain(0, {});
  for (int64_t id : lost) EXPECT_EQ(handed.count(id), 1u) << "task " << id << " was lost";
  // Epoch 1: c's lease was named by a commit when c died: b adopts all three. c, stopped rather
  // than dead, later finishes them in an Ask: ignored. The lease that Ask got is orphaned too.
  std::unique_ptr<Store> sc = env_->Client();
  std::unique_ptr<TaskMaster> c = Master(sc.get(), Tasks(kTasks));
  lease.finish = {};
  std::vector<Task> held = lease_of(*c->Ask(1, "c", lease));
  ASSERT_EQ(held.size(), 3u);
  std::vector<Task> adopted;
  for (const Task& t : held) {
    absl::StatusOr<std::optional<Task>> x = b->Adopt(1, t.id, "b");
    ASSERT_TRUE(x.ok() && x->has_value()) << x.status();
    adopted.push_back(**x);
  }
  lease.finish = held;
  absl::StatusOr<TaskAnswer> late = c->Ask(1, "c", lease);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->finished, std::vector<bool>(3, false));
  drain(1, adopted);
  for (int64_t e = 0; e < 2; ++e) {
    ASSERT_EQ(finished[e].size(), static_cast<size_t>(kTasks)) << "epoch " << e;
    for (const auto& [id, n] : finished[e]) EXPECT_EQ(n, 1) << "epoch " << e << " task " << id;
  }
  absl::StatusOr<TaskMasterState> st = b->GetState();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->epoch, 2);
  EXPECT_TRUE(st->set_aside.empty());
}

TEST_P(TaskMasterTest, ShuffleIsAFunctionOfSeedAndEpoch) {
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(10));
  std::vector<int64_t> first;
  for (int i = 0; i < 10; ++i) first.push_back(AskTask(*m, 0, "w").id);
  // A second job (new key) with the same seed hands out the same order.
  options_.key = "other/state";
  std::unique_ptr<TaskMaster> m2 = Master(store.get(), Tasks(10));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(AskTask(*m2, 0, "w").id, first[i]);
}

TEST_P(TaskMasterTest, TimeoutHandsTaskOutAgainAndIgnoresTheLateReport) {
  std::unique_ptr<Store> sa = env_->Client(), sb = env_->Client();
  std::unique_ptr<TaskMaster> a = Master(sa.get(), Tasks(1));
  std::unique_ptr<TaskMaster> b = Master(sb.get(), Tasks(1));
  Task ta = AskTask(*a, 0, "a");
  absl::StatusOr<TaskAnswer> wait = b->Ask(0, "b");
  ASSERT_TRUE(wait.ok());
  EXPECT_EQ(wait->kind, TaskAnswer::kWait);
  EXPECT_EQ(wait->retry_after, absl::Seconds(100));
  clock_.Advance(absl::Seconds(101));  // a stalls past the initial timeout
  Task tb = AskTask(*b, 0, "b");
  EXPECT_EQ(tb.id, ta.id);
  EXPECT_GT(tb.generation, ta.generation);
  EXPECT_EQ(*a->Finish({ta}), std::vector<bool>{false});  // late: ignored
  EXPECT_EQ(*b->Finish({tb}), std::vector<bool>{true});
  EXPECT_EQ(*b->Finish({tb}), std::vector<bool>{false});  // idempotent
  absl::StatusOr<TaskAnswer> end = a->Ask(0, "a");
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->kind, TaskAnswer::kEpochDone);
  // A report from the finished epoch is ignored too; asking ahead of the job is an error.
  EXPECT_EQ(*a->Finish({tb}), std::vector<bool>{false});
  EXPECT_EQ(a->Ask(5, "a").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(TaskMasterTest, AdoptTakesTasksOverAndEndEpochReclaimsOrphans) {
  std::unique_ptr<Store> sa = env_->Client(), sb = env_->Client();
  std::unique_ptr<TaskMaster> a = Master(sa.get(), Tasks(4));
  std::unique_ptr<TaskMaster> b = Master(sb.get(), Tasks(4));
  Task held = AskTask(*a, 0, "a");    // named by a commit: b adopts it
  Task orphan = AskTask(*a, 0, "a");  // taken after the commit: nobody will finish it
  Task fresh = AskTask(*b, 0, "b");
  absl::StatusOr<std::optional<Task>> adopted = b->Adopt(0, held.id, "b");
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  ASSERT_TRUE(adopted->has_value());
  EXPECT_EQ((*adopted)->id, held.id);
  EXPECT_EQ((*adopted)->range, held.range);
  EXPECT_GT((*adopted)->generation, held.generation);
  EXPECT_EQ(*a->Finish({held}), std::vector<bool>{false});  // the earlier holder is ignored
  EXPECT_EQ(*b->Finish({**adopted, fresh}), (std::vector<bool>{true, true}));
  // Adopting a done task says so; a task still in todo is adopted from there.
  absl::StatusOr<std::optional<Task>> done = b->Adopt(0, held.id, "b");
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(done->has_value());
  absl::StatusOr<TaskMasterState> st = b->GetState();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->todo.size(), 1u);
  const int64_t last = st->todo[0];
  absl::StatusOr<std::optional<Task>> from_todo = b->Adopt(0, last, "b");
  ASSERT_TRUE(from_todo.ok() && from_todo->has_value());
  ASSERT_TRUE(*b->Finish({**from_todo}) == std::vector<bool>{true});
  // Only the orphan is left pending: EndEpoch puts it back in todo, counting no failure.
  EXPECT_EQ(*b->EndEpoch(0), false);
  st = b->GetState();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->todo, std::vector<int64_t>{orphan.id});
  EXPECT_TRUE(st->pending.empty());
  EXPECT_EQ(*a->Finish({orphan}), std::vector<bool>{false});
  Task again = AskTask(*b, 0, "b");
  EXPECT_EQ(again.id, orphan.id);
  ASSERT_TRUE(*b->Finish({again}) == std::vector<bool>{true});
  EXPECT_EQ(*b->EndEpoch(0), true);  // advances the job
  EXPECT_EQ(*a->EndEpoch(0), true);  // and says so again to the others
  st = b->GetState();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->epoch, 1);
  EXPECT_EQ(st->todo.size(), 4u);
  // Errors: ahead of the job, or a task out of range.
  EXPECT_EQ(b->EndEpoch(3).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->Adopt(3, 0, "b").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->Adopt(1, 99, "b").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::optional<Task>> old = b->Adopt(0, 1, "b");  // a finished epoch
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->has_value());
}

TEST_P(TaskMasterTest, RestoreSetsTheEpochAndDoneTasksOfACheckpoint) {
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(6));
  Task stale = AskTask(*m, 0, "a");  // pending in the old state: gone after the restore
  ASSERT_TRUE(m->Restore(2, {4, 1}).ok());
  absl::StatusOr<TaskMasterState> st = m->GetState();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->epoch, 2);
  EXPECT_EQ(st->done, (std::vector<int64_t>{4, 1}));
  EXPECT_TRUE(st->pending.empty());
  // The rest in epoch 2's order: that of a fresh job's epoch 2, less the done ones.
  HashStore other;
  std::unique_ptr<TaskMaster> ref = Master(&other, Tasks(6));
  for (int64_t e = 0; e < 2; ++e) {
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(ref->Finish({AskTask(*ref, e, "r")}).ok());
    ASSERT_TRUE(*ref->EndEpoch(e));
  }
  std::vector<int64_t> expected = ref->GetState()->todo;
  expected.erase(std::remove_if(expected.begin(), expected.end(),
                                [](int64_t id) { return id == 4 || id == 1; }),
                 expected.end());
  EXPECT_EQ(st->todo, expected);
  EXPECT_EQ(*m->Finish({stale}), std::vector<bool>{false});
  std::set<int64_t> rest;
  for (int i = 0; i < 4; ++i) {
    Task t = AskTask(*m, 2, "b");
    rest.insert(t.id);
    ASSERT_TRUE(*m->Finish({t}) == std::vector<bool>{true});
  }
  EXPECT_EQ(rest, (std::set<int64_t>{0, 2, 3, 5}));
  EXPECT_TRUE(*m->EndEpoch(2));
  // Bad arguments name what is wrong.
  EXPECT_EQ(m->Restore(0, {6}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Restore(0, {1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Restore(-1, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(TaskMasterTest, TimeoutFollowsObservedTaskTime) {
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(4));
  EXPECT_EQ(m->GetState()->timeout, absl::Seconds(100));
  Task t = AskTask(*m, 0, "w");
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(m->Finish({t}).ok());
  EXPECT_EQ(m->GetState()->timeout, absl::Seconds(6));  // 3 x the longest observed
  Task t2 = AskTask(*m, 0, "w");
  EXPECT_EQ(t2.deadline, clock_.fn()() + absl::Seconds(6));
  clock_.Advance(absl::Seconds(7));
  Task again = AskTask(*m, 0, "w2");  // expired: back to the head of todo
  EXPECT_EQ(again.id, t2.id);
}

TEST_P(TaskMasterTest, RepeatedFailuresAreSetAsideAndReported) {
  options_.max_failures = 2;
  std::unique_ptr<Store> store = env_->Client();
  std::unique_ptr<TaskMaster> m = Master(store.get(), Tasks(3));
  Task t = AskTask(*m, 0, "w");
  EXPECT_TRUE(*m->Fail(t, "bad record"));
  EXPECT_FALSE(*m->Fail(t, "again"));  // stale after the first
  Task t2 = AskTask(*m, 0, "w");
  EXPECT_EQ(t2.id, t.id);
  clock_.Advance(absl::Seconds(101));  // second failure: a timeout
  std::set<int64_t> rest;
  while (true) {
    absl::StatusOr<TaskAnswer> a = m->Ask(0, "w");
    ASSERT_TRUE(a.ok());
    if (a->kind == TaskAnswer::kEpochDone) break;
    ASSERT_EQ(a->kind, TaskAnswer::kTask);
    rest.insert(a->task.id);
    ASSERT_TRUE(m->Finish({a->task}).ok());
  }
  EXPECT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest.count(t.id), 0u);
  absl::StatusOr<TaskMasterState> s = m->GetState();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->epoch, 1);
  EXPECT_EQ(s->set_aside, std::vector<int64_t>{t.id});
  ASSERT_EQ(s->set_aside_reasons.size(), 1u);
  EXPECT_NE(s->set_aside_reasons[0].find("timed_out_on_w"), std::string::npos)
      << s->set_aside_reasons[0];
  EXPECT_EQ(s->todo.size(), 2u);  // epoch 1 goes on without it

  // With every task set aside, Ask is an error instead of an endless run of empty epochs.
  options_.key = "all-fail/state";
  options_.max_failures = 1;
  std::unique_ptr<TaskMaster> m2 = Master(store.get(), Tasks(1));
  EXPECT_TRUE(*m2->Fail(AskTask(*m2, 0, "w"), "no"));
  absl::StatusOr<TaskAnswer> none = m2->Ask(0, "w");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_NE(none.status().message().find("all 1 tasks are set aside"), absl::string_view::npos);
}

TEST_P(TaskMasterTest, NewWorkerJoinsTheStateAndOtherTaskListsAreRefused) {
  std::unique_ptr<Store> s1 = env_->Client();
  std::unique_ptr<TaskMaster> m1 = Master(s1.get(), Tasks(5));
  Task t = AskTask(*m1, 0, "dead");
  m1.reset();  // the worker dies holding t
  std::unique_ptr<Store> s2 = env_->Client();
  std::unique_ptr<TaskMaster> m2 = Master(s2.get(), Tasks(5));
  absl::StatusOr<TaskMasterState> st = m2->GetState();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->pending, std::vector<int64_t>{t.id});
  EXPECT_EQ(st->todo.size(), 4u);
  auto other = TaskMaster::Create(s2.get(), Tasks(6), options_);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
  // A finish of several tasks is one transition.
  Task a = AskTask(*m2, 0, "w"), b = AskTask(*m2, 0, "w");
  int64_t before = m2->GetState()->version;
  EXPECT_EQ(*m2->Finish({a, b, t}), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(m2->GetState()->version, before + 1);
}

// Two clients making the same change from the same state (one worker name, one clock reading)
// must not both win: CompareSet reports a win only by returning the value written, so without a
// nonce in the state the loser would read the winner's identical write as its own.
TEST(TaskMasterRaceTest, IdenticalTransitionsDoNotBothWin) {
  class Racing : public HashEnv::Forward {
   public:
    using Forward::Forward;
    std::function<void()> before_compare_set;
    absl::StatusOr<std::string> CompareSet(absl::string_view k, absl::string_view e,
                                           absl::string_view d) override {
      if (std::function<void()> f = std::exchange(before_compare_set, nullptr)) f();
      return Forward::CompareSet(k, e, d);
    }
  };
  HashStore store;
  Racing a(&store), b(&store);
  FakeClock clock;
  TaskMasterOptions options;
  options.clock = clock.fn();
  auto ma = TaskMaster::Create(&a, Tasks(4), options);
  auto mb = TaskMaster::Create(&b, Tasks(4), options);
  ASSERT_TRUE(ma.ok() && mb.ok());
  absl::StatusOr<TaskAnswer> from_b;
  // b reads the same state as a and writes its hand-out just before a's compare-and-set.
  a.before_compare_set = [&] { from_b = (*mb)->Ask(0, "w"); };
  absl::StatusOr<TaskAnswer> from_a = (*ma)->Ask(0, "w");
  ASSERT_TRUE(from_a.ok() && from_b.ok()) << from_a.status() << from_b.status();
  ASSERT_EQ(from_a->kind, TaskAnswer::kTask);
  ASSERT_EQ(from_b->kind, TaskAnswer::kTask);
  EXPECT_NE(from_a->task.id, from_b->task.id);
  EXPECT_EQ((*ma)->GetState()->pending.size(), 2u);
}

TEST(TaskMasterArgsTest, BadArguments) {
  HashStore store;
  EXPECT_EQ(MakeTasks({10}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TaskMaster::Create(&store, {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<TaskRange> t = *MakeTasks({25, 0, 5}, 10);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[2], (TaskRange{0, 20, 25}));
  EXPECT_EQ(t[3], (TaskRange{2, 0, 5}));
  ASSERT_TRUE(store.Set("task_master/state", "garbage").ok());
  EXPECT_EQ(TaskMaster::Create(&store, t).status().code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Stores, TaskMasterTest, ::testing::Values("hash", "tcp", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace data
}  // namespace paddle
