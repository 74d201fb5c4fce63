// TaskMaster: the todo / pending / done queues as one compare-and-set value in the store.
//
// Note [Task master]
// The whole state (epoch, a generation counter, todo, pending with each hand-out's generation,
// worker and deadline, done, failure counts, set-aside tasks, recent task durations) is one
// text value under options.key. Every call is a transaction:
//   1. read the value (or take the one the last failed compare-and-set returned);
//   2. apply the call to a parsed copy: first time out every pending task whose deadline passed
//      (a failure: back to the head of todo, or aside after max_failures), then the call's own
//      change, and bump `version`;
//   3. CompareSet(old, new); if another worker won, go to 2 with the value it wrote.
// CompareSet tells a win only by returning the value written, so every value written carries a
// nonce (this TaskMaster's random id plus its count of transactions): without it two workers that
// made the same change from the same state at the same microsecond (one worker name in two
// threads, or a test's fake clock) would write equal values, and the loser would take the
// winner's write as its own and both would hold the same hand-out.
// So transitions are serialized by the store, each is all-or-nothing, and a worker that dies
// between two of them leaves nothing half done: its pending tasks time out and are handed out
// again under a new generation. No worker is special, so losing the one that hosts the TCPStore
// loses the store (the job restarts), but no other worker holds master state.
//
// What is guaranteed, per epoch E: every task is in exactly one of todo / pending / done / aside;
// a task enters done at most once, and only through Finish of its current hand-out (same epoch
// and generation: a worker whose task timed out and was handed out again, or that reports after
// the epoch advanced, is ignored, and Finish tells it so); epoch E ends (done becomes todo for
// E + 1, reshuffled by Philox(seed, E + 1)) only when todo and pending are both empty. Hence a
// task's samples are counted once per epoch when the trainer calls Finish exactly when the model
// update that consumed them is committed, and the model state it commits is the one later steps
// build on (the checkpoint a restarted job resumes from, or the elastic commit).
//
// Not covered: (a) samples trained on but not yet committed when a worker dies are counted only
// if the trainer rolls the model back to its last commit (restart from checkpoint or elastic
// rollback): without that they are seen twice; (b) a crash between the trainer's commit and its
// Finish leaves the task pending, so it times out and is trained again: the commit and the
// Finish must be one step (Finish several tasks in one transaction, right after the commit
// point), and the window between them is where a repeat can still occur; (c) set-aside tasks are
// missing from every later epoch, by design, and listed by GetState; (d) deadlines are wall-clock
// times, so workers' clocks must agree to well within the task timeout; (e) the state lives as
// long as the store does: a TCPStore dies with the worker hosting it, and an etcd key with the
// lease of the last worker that wrote it.
//
// Note [Leases]
// Each call is a read and a compare-and-set, and on a busy machine every round trip wakes the
// store's thread and the caller's beside the training threads. So one Ask can do the work of
// several calls in its one transaction (AskOptions):
//  - A lease of k tasks is k hand-outs made at once: each task is a pending entry of its own, with
//    its own generation, worker and deadline, exactly as k Asks in a row would leave them. So
//    nothing above changes per task: a worker that dies holding a lease leaves k pending tasks,
//    each timed out (or adopted, or put back by EndEpoch) on its own and handed out again, and a
//    Finish of one of them is judged on its own. The i-th task (from 0) is read after the i
//    before it, so its deadline is i + 1 timeouts away; a task's duration counts from the lease.
//    Near the epoch's end a lease shrinks to todo / ways tasks (at least one), so that one worker
//    does not sit on tasks that the others could read beside it.
//  - A Finish passed to an Ask (AskOptions::finish) is applied first, before the expiry and the
//    hand-out, exactly as Finish would be (the same stale rule; late reports still count while
//    nobody else holds the task); the transaction is then what a Finish followed by an Ask
//    would write, in one compare-and-set. When to finish a task stays the caller's rule (right
//    after the commit that consumed it, Not covered (b) above); folding only lets a caller that
//    asks again soon after its commit do both in one round trip. Until then the task is pending,
//    and the caller must keep naming it where a successor would find it (Note [Folded finish] in
//    examples/fashion_mnist_tasks.cc), or the window of (b) grows.
#include "paddle/data/task_master.h"

#include <algorithm>
#include <cstddef>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "paddle/core/deadline.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"

namespace paddle {
namespace data {
namespace {

constexpr char kMagic[] = "paddle-task-master 1";
constexpr size_t kDurationsKept = 16;

int64_t ToMicros(absl::Time t) { return absl::ToUnixMicros(t); }

// Spaces, commas and newlines separate fields: keep them out of free text.
std::string Clean(absl::string_view text) {
  std::string out(text.substr(0, 200));
  for (char& c : out) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\r') c = '_';
  }
  return out.empty() ? "-" : out;
}

uint64_t Fingerprint(const std::vector<TaskRange>& tasks) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ranges
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(tasks.size());
  for (const TaskRange& t : tasks) {
    mix(static_cast<uint64_t>(t.shard));
    mix(static_cast<uint64_t>(t.begin));
    mix(static_cast<uint64_t>(t.end));
  }
  return h;
}

void Shuffle(std::vector<int64_t>& ids, uint64_t seed, int64_t epoch) {
  std::sort(ids.begin(), ids.end());
  Philox rng(seed, static_cast<uint64_t>(epoch));
  for (int64_t i = static_cast<int64_t>(ids.size()) - 1; i > 0; --i) {
    // Rejection-free modulo: the bias over 64 bits is far below anything a shuffle could show.
    std::swap(ids[i], ids[rng.NextU64() % static_cast<uint64_t>(i + 1)]);
  }
}

uint64_t RandomId() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

struct TaskMaster::State {
  struct Pending {
    int64_t id = 0;
    int64_t generation = 0;
    int64_t start_us = 0;
    int64_t deadline_us = 0;
    std::string worker;
  };
  int64_t version = 0;
  int64_t epoch = 0;
  int64_t generation = 0;
  uint64_t fingerprint = 0;
  uint64_t nonce = 0;  // Note [Task master]: makes every written value unique
  std::vector<int64_t> todo;
  std::vector<Pending> pending;
  std::vector<int64_t> done;
  std::vector<std::pair<int64_t, int64_t>> failures;   // (id, count)
  std::vector<std::pair<int64_t, std::string>> aside;  // (id, last failure)
  std::vector<int64_t> durations_us;

  int64_t& Failures(int64_t id) {
    for (auto& f : failures) {
      if (f.first == id) return f.second;
    }
    failures.emplace_back(id, 0);
    return failures.back().second;
  }

  std::string Serialize() const {
    std::string s =
        absl::StrCat(kMagic, "\nversion ", version, " epoch ", epoch, " generation ", generation,
                     " fingerprint ", fingerprint, " nonce ", nonce, "\ntodo");
    for (int64_t id : todo) absl::StrAppend(&s, " ", id);
    absl::StrAppend(&s, "\npending");
    for (const Pending& p : pending) {
      absl::StrAppend(&s, " ", p.id, ",", p.generation, ",", p.start_us, ",", p.deadline_us, ",",
                      p.worker);
    }
    absl::StrAppend(&s, "\ndone");
    for (int64_t id : done) absl::StrAppend(&s, " ", id);
    absl::StrAppend(&s, "\nfailures");
    for (const auto& f : failures) absl::StrAppend(&s, " ", f.first, ",", f.second);
    absl::StrAppend(&s, "\ndurations");
    for (int64_t d : durations_us) absl::StrAppend(&s, " ", d);
    for (const auto& a : aside) absl::StrAppend(&s, "\naside ", a.first, ",", a.second);
    absl::StrAppend(&s, "\n");
    return s;
  }

  static absl::StatusOr<State> Parse(absl::string_view text, int64_t num_tasks) {
    State st;
    auto bad = [&](absl::string_view why) {
      return absl::DataLossError(
          absl::StrCat("task master state: ", why, " in \"", text.substr(0, 200), "\""));
    };
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    if (lines.size() < 7 || lines[0] != kMagic) return bad("not a task master state");
    std::vector<absl::string_view> head = absl::StrSplit(lines[1], ' ');
    if (head.size() != 10 || head[0] != "version" || !absl::SimpleAtoi(head[1], &st.version) ||
        !absl::SimpleAtoi(head[3], &st.epoch) || !absl::SimpleAtoi(head[5], &st.generation) ||
        !absl::SimpleAtoi(head[7], &st.fingerprint) || !absl::SimpleAtoi(head[9], &st.nonce)) {
      return bad("bad header line");
    }
    auto fields = [&](absl::string_view line, absl::string_view name,
                      std::vector<absl::string_view>* out) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      if (f.empty() || f[0] != name) return false;
      out->assign(f.begin() + 1, f.end());
      return true;
    };
    auto id_ok = [&](int64_t id) { return id >= 0 && id < num_tasks; };
    std::vector<absl::string_view> f;
    int64_t v;
    if (!fields(lines[2], "todo", &f)) return bad("no todo line");
    for (absl::string_view x : f) {
      if (!absl::SimpleAtoi(x, &v) || !id_ok(v)) return bad("bad todo entry");
      st.todo.push_back(v);
    }
    if (!fields(lines[3], "pending", &f)) return bad("no pending line");
    for (absl::string_view x : f) {
      std::vector<absl::string_view> p = absl::StrSplit(x, ',');
      Pending e;
      if (p.size() != 5 || !absl::SimpleAtoi(p[0], &e.id) || !id_ok(e.id) ||
          !absl::SimpleAtoi(p[1], &e.generation) || !absl::SimpleAtoi(p[2], &e.start_us) ||
          !absl::SimpleAtoi(p[3], &e.deadline_us)) {
        return bad("bad pending entry");
      }
      e.worker = std::string(p[4]);
      st.pending.push_back(std::move(e));
    }
    if (!fields(lines[4], "done", &f)) return bad("no done line");
    for (absl::string_view x : f) {
      if (!absl::SimpleAtoi(x, &v) || !id_ok(v)) return bad("bad done entry");
      st.done.push_back(v);
    }
    if (!fields(lines[5], "failures", &f)) return bad("no failures line");
    for (absl::string_view x : f) {
      std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(x, ',');
      int64_t id, n;
      if (!absl::SimpleAtoi(p.first, &id) || !id_ok(id) || !absl::SimpleAtoi(p.second, &n)) {
        return bad("bad failures entry");
      }
      st.failures.emplace_back(id, n);
    }
    if (!fields(lines[6], "durations", &f)) return bad("no durations line");
    for (absl::string_view x : f) {
      if (!absl::SimpleAtoi(x, &v)) return bad("bad duration");
      st.durations_us.push_back(v);
    }
    for (size_t i = 7; i < lines.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(lines[i], ' ');
      std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv.second, ',');
      if (kv.first != "aside" || !absl::SimpleAtoi(p.first, &v) || !id_ok(v)) {
        return bad("bad aside line");
      }
      st.aside.emplace_back(v, std::string(p.second));
    }
    // Every task in exactly one queue: the invariant of Note [Task master].
    std::vector<int> seen(num_tasks, 0);
    for (int64_t id : st.todo) ++seen[id];
    for (const Pending& p : st.pending) ++seen[p.id];
    for (int64_t id : st.done) ++seen[id];
    for (const auto& a : st.aside) ++seen[a.first];
    for (int64_t id = 0; id < num_tasks; ++id) {
      if (seen[id] != 1) return bad(absl::StrCat("task ", id, " is in ", seen[id], " queues"));
    }
    return st;
  }
};

absl::StatusOr<std::vector<TaskRange>> MakeTasks(absl::Span<const int64_t> record_counts,
                                                 int64_t records_per_task) {
  if (records_per_task <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeTasks: records_per_task must be > 0, got ", records_per_task));
  }
  std::vector<TaskRange> tasks;
  for (size_t s = 0; s < record_counts.size(); ++s) {
    if (record_counts[s] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("MakeTasks: shard ", s, " has ", record_counts[s], " records"));
    }
    for (int64_t b = 0; b < record_counts[s]; b += records_per_task) {
      tasks.push_back(
          TaskRange{static_cast<int32_t>(s), b, std::min(record_counts[s], b + records_per_task)});
    }
  }
  return tasks;
}

absl::StatusOr<std::unique_ptr<TaskMaster>> TaskMaster::Create(Store* store,
                                                               std::vector<TaskRange> tasks,
                                                               TaskMasterOptions options) {
  if (store == nullptr || tasks.empty() || options.max_failures < 1 ||
      options.timeout_factor <= 0 || options.min_timeout > options.max_timeout ||
      options.key.empty() || !options.clock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TaskMaster: need a store, at least one task (got ", tasks.size(),
        "), max_failures >= 1 (got ", options.max_failures, "), timeout_factor > 0 (got ",
        options.timeout_factor, "), min_timeout <= max_timeout, a key and a clock"));
  }
  const uint64_t fingerprint = Fingerprint(tasks);
  std::unique_ptr<TaskMaster> master(
      new TaskMaster(store, std::move(tasks), std::move(options), fingerprint, RandomId()));
  State initial;
  initial.fingerprint = fingerprint;
  for (int64_t i = 0; i < static_cast<int64_t>(master->tasks_.size()); ++i) {
    initial.todo.push_back(i);
  }
  Shuffle(initial.todo, master->options_.seed, 0);
  const std::string desired = initial.Serialize();
  ASSIGN_OR_RETURN(std::string now, store->CompareSet(master->options_.key, "", desired));
  if (now != desired) {
    absl::StatusOr<State> existing = State::Parse(now, static_cast<int64_t>(master->tasks_.size()));
    if (!existing.ok() || existing->fingerprint != fingerprint) {
      return absl::FailedPreconditionError(
          absl::StrCat("TaskMaster: ", store->Describe(), " key ", master->options_.key,
                       " holds the task queues of a different task list (",
                       existing.ok() ? "another fingerprint" : existing.status().message(),
                       "); use a new key (or job id) when the shards or records_per_task change"));
    }
  }
  return master;
}

absl::Duration TaskMaster::Timeout(const State& state) const {
  if (state.durations_us.empty()) return options_.initial_timeout;
  int64_t longest = *std::max_element(state.durations_us.begin(), state.durations_us.end());
  absl::Duration t = absl::Microseconds(longest) * options_.timeout_factor;
  return std::min(options_.max_timeout, std::max(options_.min_timeout, t));
}

void TaskMaster::FailPending(State& state, int64_t id, const std::string& reason) const {
  int64_t& n = state.Failures(id);
  ++n;
  if (n >= options_.max_failures) {
    state.aside.emplace_back(id, Clean(absl::StrCat("failed ", n, " times, last: ", reason)));
  } else {
    state.todo.insert(state.todo.begin(), id);  // first in line: the epoch waits for it
  }
}

void TaskMaster::Expire(State& state, absl::Time now) const {
  const int64_t now_us = ToMicros(now);
  std::vector<State::Pending> kept;
  for (State::Pending& p : state.pending) {
    if (p.deadline_us < now_us) {
      FailPending(state, p.id,
                  absl::StrCat("timed out on ", p.worker, " after ",
                               absl::FormatDuration(absl::Microseconds(now_us - p.start_us))));
    } else {
      kept.push_back(std::move(p));
    }
  }
  state.pending = std::move(kept);
}

absl::Status TaskMaster::Transact(absl::string_view op, const std::function<bool(State&)>& change) {
  const Deadline deadline = Deadline::After(options_.call_timeout);
  const int64_t num_tasks = static_cast<int64_t>(tasks_.size());
  ASSIGN_OR_RETURN(std::string current, store_->Get(options_.key, std::max(absl::Milliseconds(1),
                                                                           deadline.Remaining())));
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<State> state = State::Parse(current, num_tasks);
    if (!state.ok()) {
      return Annotate(state.status(), absl::StrCat("TaskMaster::", op, " reading ", options_.key,
                                                   " from ", store_->Describe()));
    }
    if (!change(*state)) return absl::OkStatus();
    ++state->version;
    state->nonce = instance_id_ + transactions_.fetch_add(1, std::memory_order_relaxed);
    const std::string desired = state->Serialize();
    ASSIGN_OR_RETURN(std::string after, store_->CompareSet(options_.key, current, desired));
    if (after == desired) return absl::OkStatus();
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(
          absl::StrCat("TaskMaster::", op, ": lost the compare-and-set of ", options_.key, " on ",
                       store_->Describe(), " ", attempt, " times in ",
                       absl::FormatDuration(options_.call_timeout),
                       "; too many workers for one key, or raise TaskMasterOptions::call_timeout"));
    }
    current = std::move(after);
  }
}

absl::StatusOr<TaskAnswer> TaskMaster::Ask(int64_t epoch, absl::string_view worker,
                                           const AskOptions& options) {
  if (options.max_tasks < 1 || options.ways < 1) {
    return absl::InvalidArgumentError(absl::StrCat("TaskMaster::Ask: ", worker, " asks for up to ",
                                                   options.max_tasks, " tasks over ", options.ways,
                                                   " ways; both must be >= 1"));
  }
  TaskAnswer answer;
  absl::Status error;
  RETURN_IF_ERROR(Transact("Ask", [&](State& st) {
    answer = TaskAnswer();
    error = absl::OkStatus();
    const absl::Time now = options_.clock();
    if (st.epoch < epoch) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "TaskMaster::Ask: ", worker, " asks for epoch ", epoch, " but the job is in epoch ",
          st.epoch, " (", st.todo.size() + st.pending.size(), " tasks not done)"));
      return false;
    }
    // Note [Leases]: the finishes first, as a Finish call before this Ask would have made them.
    bool changed = FinishIn(st, options.finish, now, answer.finished);
    if (st.epoch > epoch) {
      answer.kind = TaskAnswer::kEpochDone;
      return changed;
    }
    const size_t pending_before = st.pending.size();
    Expire(st, now);
    changed = changed || st.pending.size() != pending_before;
    if (!st.todo.empty()) {
      const size_t n = std::clamp<size_t>(st.todo.size() / static_cast<size_t>(options.ways), 1,
                                          static_cast<size_t>(options.max_tasks));
      const absl::Duration timeout = Timeout(st);
      for (size_t i = 0; i < n; ++i) {
        State::Pending p;
        p.id = st.todo[i];
        p.generation = ++st.generation;
        p.start_us = ToMicros(now);
        p.deadline_us = ToMicros(now + timeout * static_cast<int64_t>(i + 1));
        p.worker = Clean(worker);
        Task task{p.id, st.epoch, p.generation, tasks_[p.id], absl::FromUnixMicros(p.deadline_us)};
        if (i == 0) {
          answer.task = task;
        } else {
          answer.more.push_back(task);
        }
        st.pending.push_back(std::move(p));
      }
      st.todo.erase(st.todo.begin(), st.todo.begin() + static_cast<std::ptrdiff_t>(n));
      answer.kind = TaskAnswer::kTask;
      return true;
    }
    if (!st.pending.empty()) {
      int64_t first = st.pending.front().deadline_us;
      for (const State::Pending& p : st.pending) first = std::min(first, p.deadline_us);
      answer.kind = TaskAnswer::kWait;
      answer.retry_after = std::max(absl::ZeroDuration(), absl::FromUnixMicros(first) - now);
      return changed;
    }
    if (st.done.empty()) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "TaskMaster::Ask: all ", tasks_.size(), " tasks are set aside after ",
          options_.max_failures, " failures each (first: task ", st.aside.front().first, ", ",
          st.aside.front().second, "); fix the data or the workers and start a new job"));
      return changed;
    }
    // Epoch over: done becomes the next epoch's todo, in its own order.
    st.todo = std::move(st.done);
    st.done.clear();
    ++st.epoch;
    Shuffle(st.todo, options_.seed, st.epoch);
    answer.kind = TaskAnswer::kEpochDone;
    return true;
  }));
  RETURN_IF_ERROR(error);
  return answer;
}

bool TaskMaster::FinishIn(State& st, absl::Span<const Task> tasks, absl::Time now,
                          std::vector<bool>& accepted) const {
  accepted.assign(tasks.size(), false);
  bool changed = false;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].epoch != st.epoch) continue;
    auto it = std::find_if(st.pending.begin(), st.pending.end(), [&](const State::Pending& p) {
      return p.id == tasks[i].id && p.generation == tasks[i].generation;
    });
    if (it == st.pending.end()) continue;
    // A report after the deadline still counts while nobody else holds the task: the work is as
    // good, and handing it out again would only repeat it.
    st.durations_us.push_back(std::max<int64_t>(0, ToMicros(now) - it->start_us));
    if (st.durations_us.size() > kDurationsKept) st.durations_us.erase(st.durations_us.begin());
    st.done.push_back(it->id);
    st.pending.erase(it);
    accepted[i] = true;
    changed = true;
  }
  return changed;
}

absl::StatusOr<std::vector<bool>> TaskMaster::Finish(absl::Span<const Task> tasks) {
  std::vector<bool> accepted;
  RETURN_IF_ERROR(Transact(
      "Finish", [&](State& st) { return FinishIn(st, tasks, options_.clock(), accepted); }));
  return accepted;
}

absl::StatusOr<bool> TaskMaster::Fail(const Task& task, absl::string_view reason) {
  bool accepted = false;
  RETURN_IF_ERROR(Transact("Fail", [&](State& st) {
    accepted = false;
    if (task.epoch != st.epoch) return false;
    auto it = std::find_if(st.pending.begin(), st.pending.end(), [&](const State::Pending& p) {
      return p.id == task.id && p.generation == task.generation;
    });
    if (it == st.pending.end()) return false;
    std::string who = it->worker;
    st.pending.erase(it);
    FailPending(st, task.id, absl::StrCat(who, ": ", reason));
    accepted = true;
    return true;
  }));
  return accepted;
}

absl::StatusOr<std::optional<Task>> TaskMaster::Adopt(int64_t epoch, int64_t id,
                                                      absl::string_view worker) {
  if (id < 0 || id >= static_cast<int64_t>(tasks_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("TaskMaster::Adopt: ", worker, " names task ", id, " of ", tasks_.size()));
  }
  std::optional<Task> adopted;
  absl::Status error;
  RETURN_IF_ERROR(Transact("Adopt", [&](State& st) {
    adopted.reset();
    error = absl::OkStatus();
    if (st.epoch > epoch) return false;
    if (st.epoch < epoch) {
      error = absl::FailedPreconditionError(absl::StrCat("TaskMaster::Adopt: ", worker,
                                                         " adopts task ", id, " of epoch ", epoch,
                                                         " but the job is in epoch ", st.epoch));
      return false;
    }
    if (std::find(st.done.begin(), st.done.end(), id) != st.done.end()) return false;
    for (const auto& a : st.aside) {
      if (a.first == id) {
        error = absl::FailedPreconditionError(
            absl::StrCat("TaskMaster::Adopt: task ", id, " was set aside (", a.second, ")"));
        return false;
      }
    }
    const absl::Time now = options_.clock();
    auto it = std::find_if(st.pending.begin(), st.pending.end(),
                           [&](const State::Pending& p) { return p.id == id; });
    if (it != st.pending.end()) {
      st.pending.erase(it);
    } else {
      st.todo.erase(std::remove(st.todo.begin(), st.todo.end(), id), st.todo.end());
    }
    State::Pending p;
    p.id = id;
    p.generation = ++st.generation;
    p.start_us = ToMicros(now);
    p.deadline_us = ToMicros(now + Timeout(st));
    p.worker = Clean(worker);
    adopted = Task{id, st.epoch, p.generation, tasks_[id], absl::FromUnixMicros(p.deadline_us)};
    st.pending.push_back(std::move(p));
    return true;
  }));
  RETURN_IF_ERROR(error);
  return adopted;
}

absl::StatusOr<bool> TaskMaster::EndEpoch(int64_t epoch) {
  bool ended = false;
  absl::Status error;
  RETURN_IF_ERROR(Transact("EndEpoch", [&](State& st) {
    error = absl::OkStatus();
    ended = st.epoch > epoch;
    if (ended) return false;
    if (st.epoch < epoch || (st.todo.empty() && st.pending.empty() && st.done.empty())) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "TaskMaster::EndEpoch(", epoch, "): the job is in epoch ", st.epoch, " with ",
          st.done.size(), " tasks done and ", st.aside.size(), " set aside"));
      return false;
    }
    if (!st.pending.empty()) {
      for (auto it = st.pending.rbegin(); it != st.pending.rend(); ++it) {
        st.todo.insert(st.todo.begin(), it->id);
      }
      st.pending.clear();
      return true;
    }
    if (!st.todo.empty()) return false;
    st.todo = std::move(st.done);
    st.done.clear();
    ++st.epoch;
    Shuffle(st.todo, options_.seed, st.epoch);
    ended = true;
    return true;
  }));
  RETURN_IF_ERROR(error);
  return ended;
}

absl::Status TaskMaster::Restore(int64_t epoch, absl::Span<const int64_t> done) {
  const auto n = static_cast<int64_t>(tasks_.size());
  std::vector<bool> is_done(tasks_.size(), false);
  for (int64_t id : done) {
    if (epoch < 0 || id < 0 || id >= n || is_done[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("TaskMaster::Restore: epoch ", epoch, ", task ", id, " of ", n,
                       " (each done task once, each in [0, ", n, "))"));
    }
    is_done[id] = true;
  }
  if (epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("TaskMaster::Restore: epoch ", epoch));
  }
  return Transact("Restore", [&](State& st) {
    st.epoch = epoch;
    st.pending.clear();
    st.done.assign(done.begin(), done.end());
    st.todo.clear();
    for (int64_t i = 0; i < n; ++i) st.todo.push_back(i);
    Shuffle(st.todo, options_.seed, epoch);
    st.todo.erase(std::remove_if(st.todo.begin(), st.todo.end(),
                                 [&](int64_t id) {
                                   if (is_done[id]) return true;
                                   for (const auto& a : st.aside) {
                                     if (a.first == id) return true;
                                   }
                                   return false;
                                 }),
                  st.todo.end());
    return true;
  });
}

absl::StatusOr<TaskMasterState> TaskMaster::GetState() {
  TaskMasterState out;
  RETURN_IF_ERROR(Transact("GetState", [&](State& st) {
    out = TaskMasterState();
    out.epoch = st.epoch;
    out.version = st.version;
    out.todo = st.todo;
    for (const State::Pending& p : st.pending) out.pending.push_back(p.id);
    out.done = st.done;
    for (const auto& a : st.aside) {
      out.set_aside.push_back(a.first);
      out.set_aside_reasons.push_back(a.second);
    }
    out.timeout = Timeout(st);
    return false;
  }));
  return out;
}

}  // namespace data
}  // namespace paddle
