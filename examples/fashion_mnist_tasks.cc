// fashion_mnist --elastic --data=tasks: task-master data for an elastic worker (see the header).
//
// Note [Task positions]
// The task master (paddle/data/task_master.h) alone gives "every task finished once per epoch";
// an elastic trainer rolls its model back, so what must be exact is "every sample in exactly one
// committed update". The data position is therefore part of the elastic commit (Note [Elastic
// commit] in paddle/parallel/elastic_state.cc):
//  1. A rank holds the tasks it took (Ask) or adopted, each with `used`, the records it has
//     consumed. Each step it reads its share of the global batch from them, asking for a new task
//     only when all it holds are used up.
//  2. At a commit point every rank, in one allgather, publishes its held tasks (id, generation,
//     used) and its steps' sample ids since the last commit. Every rank then holds the same list
//     of all ranks' tasks; it goes into the commit's extras, so the commit that the next
//     generation adopts (the highest one) says exactly how far every task was consumed.
//  3. After the commit each rank Finishes its tasks whose `used` reached the end: only then do
//     they count as done in the store. The Finish rides on the rank's next Ask (Note [Folded
//     finish]), and until the store has them done every later commit names them again, used up.
//     A rank that dies before its Finish leaves them pending, and step 4 finishes them.
//  4. A new generation, after adopting the commit, forgets everything read since (those steps
//     were rolled back) and splits the commit's task list: rank r adopts the i-th task for
//     i % size == r (TaskMaster::Adopt: a new generation in the store, so the earlier holder's
//     late Finish, e.g. from a worker stopped past the timeout, is ignored), finishes it if it
//     was used up, else reads on from `used`.
//  5. The last step of an epoch: with synchronous allreduce every rank joins every step; a rank
//     that finds no sample (the master has no task left to hand out) joins with a zero-weight
//     dummy sample, and each rank's loss is weighted by its samples' share of the global batch
//     (Note [Short steps]). A step whose count is 0 on every rank trains nothing: the ranks commit
//     and finish (3), meet, and rank 0 calls TaskMaster::EndEpoch: every task still pending then is
//     one that no member holds (taken by a rank after its last commit and rolled back, or by a
//     removed worker), so it goes back to todo and the epoch goes on; once nothing is pending or
//     in todo the epoch ends. Rank 0 broadcasts the verdict.
// The sample ledger is written from step 2's lines: every rank appends every rank's lines of the
// commit it made, tagged with the generation and the rank that trained them, so a line survives
// as long as one rank that made the commit does; tools/ledger-check counts one line per
// (epoch, step, generation, rank) and fails on two such lines that differ.
// Not covered: a commit only one rank made before dying, while the others failed the same
// step's exchange (they redo those steps; its ledger lines then repeat them); the task timeouts
// of the master are not used here (ownership moves through the commit instead: timeouts are
// set to a day), so a worker that is neither dead nor progressing holds the job as the elastic
// group's timeouts decide.
#include "examples/fashion_mnist_tasks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "paddle/core/status.h"
#include "paddle/data/fashion_mnist.h"

namespace paddle::examples {
namespace {

constexpr int64_t kMaxOpen = 64;  // tasks a commit can name (extras keys data/open/NN/...)
constexpr int64_t kMaxHeld = 16;  // tasks one rank can hold at a commit
constexpr int64_t kImageBytes = 28 * 28;
// The lease of one Ask (Note [Task prefetch]). 1: with 2 the prefetch answer waits for both
// tasks' reading, and under load that cost more than the round trips it saved.
constexpr int kTasksPerAsk = 1;

// The extras key of field "id", "gen" or "used" of open task i < kMaxOpen. Made once: a commit
// every few steps looks up 3 x kMaxOpen of them, and formatting them each time was a visible
// part of the step.
const std::string& OpenKey(int64_t i, const char* field) {
  static const std::vector<std::string>* const keys = [] {
    auto* k = new std::vector<std::string>;
    for (int64_t j = 0; j < kMaxOpen; ++j) {
      for (const char* f : {"id", "gen", "used"}) {
        k->push_back(absl::StrFormat("data/open/%02d/%s", j, f));
      }
    }
    return k;
  }();
  const int f = field[0] == 'i' ? 0 : field[0] == 'g' ? 1 : 2;
  return (*keys)[static_cast<size_t>(3 * i + f)];
}

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Note [Sample digest]: splitmix64 of the sample id (its first output with the id as the state),
// so that tests can recompute it. The added constant keeps id 0 from mixing to 0.
uint64_t SampleMix(int64_t id) {
  uint64_t z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The Ask of Note [Folded finish]: a lease (shrinking near the epoch's end, split `ways` ways),
// and the finish of `finishing`.
absl::StatusOr<data::TaskAnswer> AskLease(data::TaskMaster& master, int64_t epoch,
                                          const std::string& worker, int ways,
                                          const std::vector<data::Task>& finishing) {
  data::AskOptions o;
  o.max_tasks = kTasksPerAsk;
  o.ways = ways;
  o.finish = finishing;
  return master.Ask(epoch, worker, o);
}

}  // namespace

// Note [Master calls]: one thread beside the training thread that makes the task master's calls
// handed to it, in order. A thread kept for the job rather than one per call: under load,
// starting a thread cost about as much as the store round trip it was meant to hide.
class TaskData::MasterThread {
 public:
  MasterThread() : thread_([this] { Loop(); }) {}
  // Makes the calls still queued, then stops.
  ~MasterThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  template <typename F>
  std::future<std::invoke_result_t<F>> Run(F f) {
    auto call = std::make_shared<std::packaged_task<std::invoke_result_t<F>()>>(std::move(f));
    std::future<std::invoke_result_t<F>> result = call->get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back([call] { (*call)(); });
    }
    cv_.notify_one();
    return result;
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> call;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !calls_.empty(); });
        if (calls_.empty()) return;
        call = std::move(calls_.front());
        calls_.pop_front();
      }
      call();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> calls_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;                       // last: it runs Loop() on the members above
};

absl::StatusOr<std::unique_ptr<TaskData>> TaskData::Create(Store* store, TaskDataOptions options) {
  if (options.records_per_task <= 0 || options.commit_every <= 0 || options.global_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data=tasks: --records-per-task (", options.records_per_task, "), --commit-every (",
        options.commit_every, ") and --batch (", options.global_batch, ") must be positive"));
  }
  // Held tasks at a commit: the used-up ones since the last commit, one being read and one
  // prefetched.
  if (Ceil(options.commit_every * options.global_batch, options.records_per_task) + 3 > kMaxHeld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data=tasks: --records-per-task=", options.records_per_task, " is too small for --batch=",
        options.global_batch, " and --commit-every=", options.commit_every, ": a rank could hold ",
        "more than ", kMaxHeld, " tasks between commits; use at least ",
        Ceil(options.commit_every * options.global_batch, kMaxHeld - 3), " records per task"));
  }
  ASSIGN_OR_RETURN(data::ShardSet set, data::LoadShardSet(options.shards_dir));
  int64_t offset = 0, label = -1, image = -1;
  for (const data::ShardField& f : set.fields) {
    if (f.name == "label" && f.dtype == "uint8" && f.bytes == 1) label = offset;
    if (f.name == "image" && f.dtype == "uint8" && f.bytes == kImageBytes) image = offset;
    offset += f.bytes;
  }
  if (label < 0 || image < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shards=", options.shards_dir, ": MANIFEST has no fields `label uint8 1` and `image ",
        "uint8 28,28`; write Fashion-MNIST shards with //tools:make_shards --fashion-mnist"));
  }
  ASSIGN_OR_RETURN(std::vector<data::TaskRange> tasks,
                   data::MakeTasks(set.record_counts, options.records_per_task));
  data::TaskMasterOptions mo;
  mo.key = "data/task_master";
  mo.seed = options.seed;
  // Note [Task positions]: ownership moves through the commit, not through timeouts.
  mo.initial_timeout = mo.min_timeout = mo.max_timeout = absl::Hours(24);
  mo.max_failures = 1 << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<data::TaskMaster> master,
                   data::TaskMaster::Create(store, std::move(tasks), mo));
  data::TaskFeedLayout layout;
  layout.record_bytes = set.RecordBytes();
  layout.label_offset = label;
  layout.image_offset = image;
  layout.image_bytes = kImageBytes;
  layout.mean = data::kFashionMnistMean;
  layout.std = data::kFashionMnistStd;
  std::unique_ptr<TaskData> out(new TaskData(std::move(set), std::move(master), options, layout));
  if (!options.ledger_dir.empty()) {
    if (::mkdir(options.ledger_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(absl::StrCat("--sample-ledger=", options.ledger_dir,
                                                     ": cannot create it: ", std::strerror(errno)));
    }
    std::string path = absl::StrFormat("%s/ledger-%d-%d.jsonl", options.ledger_dir, getpid(),
                                       absl::ToUnixMicros(absl::Now()));
    out->ledger_ = std::fopen(path.c_str(), "a");
    if (out->ledger_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sample-ledger: cannot open ", path, ": ", std::strerror(errno)));
    }
  }
  return out;
}

TaskData::TaskData(data::ShardSet set, std::unique_ptr<data::TaskMaster> master,
                   TaskDataOptions options, data::TaskFeedLayout layout)
    : set_(std::move(set)),
      master_(std::move(master)),
      options_(std::move(options)),
      layout_(layout) {}

TaskData::~TaskData() {
  // Their threads use master_; a prefetched task left pending goes back to todo at the epoch's
  // tail (Note [Task positions], step 5).
  if (asking_.valid()) asking_.wait();
  held_.clear();  // the feeds' threads
  if (ledger_ != nullptr) std::fclose(ledger_);
}

void TaskData::InitExtras(std::map<std::string, int64_t>& extras) const {
  extras["data/open"] = 0;
  for (int64_t i = 0; i < kMaxOpen; ++i) {
    for (const char* f : {"id", "gen", "used"}) extras[OpenKey(i, f)] = -1;
  }
}

std::string TaskData::Worker() const {
  return absl::StrFormat("rank%d/pid%d/gen%d", rank_, getpid(), generation_);
}

absl::Status TaskData::StartGeneration(const std::map<std::string, int64_t>& extras, int64_t epoch,
                                       int64_t generation, int rank, int size) {
  // Note [Master calls]: a task asked for since the commit is rolled back with the steps (still
  // pending, it goes back to todo at the epoch's tail); a Finish not made, or failed, is made
  // below by whoever adopts its tasks, which the commit names used up (Note [Folded finish]).
  if (asking_.valid()) asking_.get();
  tail_ = false;
  held_.clear();
  unfinished_.clear();
  ahead_epoch_ = -1;
  full_steps_ = 0;
  finishing_.clear();
  lines_.clear();
  committing_.clear();
  rank_ = rank;
  size_ = size;
  generation_ = generation;
  auto get = [&](const std::string& key) {
    auto it = extras.find(key);
    return it == extras.end() ? int64_t{-1} : it->second;
  };
  const int64_t open = get("data/open");
  if (open < 0 || open > kMaxOpen) {
    return absl::DataLossError(absl::StrCat("--data=tasks: the commit names ", open, " tasks"));
  }
  // Every used-up task of the commit is done once its adopter finishes it below: done() lists it
  // on every rank (a checkpoint of rank 0 names it).
  for (int64_t i = 0; i < open; ++i) {
    const int64_t id = get(OpenKey(i, "id"));
    if (id < 0 || id >= static_cast<int64_t>(master_->tasks().size())) {
      return absl::DataLossError(absl::StrCat("--data=tasks: the commit names task ", id));
    }
    const data::TaskRange& r = master_->tasks()[static_cast<size_t>(id)];
    if (get(OpenKey(i, "used")) == r.end - r.begin &&
        std::find(done_.begin(), done_.end(), id) == done_.end()) {
      done_.push_back(id);
    }
  }
  std::vector<data::Task> used_up;
  for (int64_t i = rank; i < open; i += size) {
    const int64_t id = get(OpenKey(i, "id")), used = get(OpenKey(i, "used"));
    ASSIGN_OR_RETURN(std::optional<data::Task> task, master_->Adopt(epoch, id, Worker()));
    if (!task) {
      // Done already: its holder finished it after the commit (step 3 of the Note).
      const data::TaskRange& r = master_->tasks()[static_cast<size_t>(id)];
      if (used != r.end - r.begin) {
        return absl::DataLossError(absl::StrCat(
            "--data=tasks: the adopted commit has task ", id, " of epoch ", epoch, " used to ",
            used, " of ", r.end - r.begin, " records, but the task master has it done"));
      }
      continue;
    }
    Held h{*task, used, nullptr};
    if (used == h.size()) {
      used_up.push_back(h.task);
    } else {
      held_.push_back(std::move(h));
    }
  }
  if (!used_up.empty()) RETURN_IF_ERROR(master_->Finish(used_up).status());
  return absl::OkStatus();
}

data::RecordRange TaskData::RangeOf(const data::Task& task, int64_t used) const {
  return data::RecordRange{set_.ShardPath(static_cast<size_t>(task.range.shard)),
                           task.range.begin + used, task.range.end};
}

absl::Status TaskData::StartFeed(size_t i) {
  Held& h = held_[i];
  if (h.feed != nullptr) return absl::OkStatus();
  data::TaskFeedOptions fo;
  fo.index_cache = indexes_;
  ASSIGN_OR_RETURN(h.feed, data::TaskFeed::Start(RangeOf(h.task, h.used), layout_, fo));
  return absl::OkStatus();
}

int64_t TaskData::RecordsHeld() const {
  int64_t left = 0;
  for (const Held& h : held_) left += h.size() - h.used;
  return left;
}

// Note [Short steps]
// A step's update is the sum of its samples' loss gradients over the global batch (--batch), not
// their mean: a rank weights its mean loss by got x world / batch (ShortStepWeight) and DDP
// averages over the world. A full step is the same either way. The epoch's tail has short steps
// by design: tasks are handed out whole, so a rank can still hold up to a task's records when the
// others have none left, and the steps until it has read them are short (several in a row after
// a membership change, when the ranks' tasks no longer end together). Weighted by the step's own
// total, each of them was a full step at the full learning rate on a few samples, and such a
// tail cost whole points of test accuracy at the epoch's end (docs/data.md); weighted by the
// global batch, an epoch's updates add up to the same whichever steps its samples fall in.
double ShortStepWeight(int64_t got, int world, int64_t global_batch) {
  return static_cast<double>(got) * world / static_cast<double>(std::max<int64_t>(global_batch, 1));
}

// Note [Step count]
// Every rank must know each step's total: a total of 0 ends the epoch (Note [Task positions], step
// 5), and the progress counts it. It is the global batch whenever every rank reads its full share,
// which is every step but the last few of an epoch. So the count is allreduced only now and then:
// with it each rank sends how many more full steps the records of the tasks it already holds cover
// (records held / its share; 0 if this step was short), and the minimum over ranks, the same on
// every rank, is how many following steps skip the allreduce and count the global batch. Those
// steps cannot come up short: a rank reads its held tasks before it asks for more (Take), and held
// records only shrink by what the steps take. A new generation (StartGeneration) sets the count
// back to 0, as do short steps near an epoch's end, where the allreduce again runs every step (and
// a total of 0 still ends the epoch). What was read, and so the ledger and exactly-once, do not
// depend on it.
absl::StatusOr<TaskData::StepSamples> TaskData::TakeStep(Communicator& comm, int64_t epoch,
                                                         int64_t step, int64_t global_batch) {
  const int64_t mine =
      global_batch / comm.world_size() + (comm.rank() < global_batch % comm.world_size() ? 1 : 0);
  StepSamples s;
  ASSIGN_OR_RETURN(s.got, Take(epoch, step, mine, &s.images, &s.labels));
  tail_ = false;
  step_epoch_ = epoch;
  if (full_steps_ > 0) {
    --full_steps_;
    if (s.got != mine) {
      return absl::InternalError(absl::StrCat("--data=tasks: rank ", comm.rank(), " read ", s.got,
                                              " samples in step ", step, " but had announced ",
                                              mine, " (Note [Step count])"));
    }
    s.global = global_batch;
    return s;
  }
  // [the step's samples, then per rank the full steps its held tasks still cover]
  ASSIGN_OR_RETURN(Tensor count, Tensor::Zeros({1 + comm.world_size()}, DType::kInt64));
  int64_t* c = count.data<int64_t>();
  c[0] = s.got;
  c[1 + comm.rank()] = s.got == mine ? RecordsHeld() / std::max<int64_t>(mine, 1) : 0;
  RETURN_IF_ERROR(comm.Allreduce(count, ReduceOp::kSum)->Wait());
  s.global = c[0];
  tail_ = s.global == 0;
  full_steps_ = *std::min_element(c + 1, c + 1 + comm.world_size());
  return s;
}

// Note [Task prefetch]
// A rank asks for its next tasks, one lease ahead at most (kTasksPerAsk tasks in one Ask, Note
// [Leases] in paddle/data/task_master.cc), while it still has a few steps' records in hand (4
// steps' worth: enough for the Ask to come back and the tasks to be read before they are
// needed). Near the epoch's end the lease shrinks to the rank's share of todo (AskOptions::ways is
// the number of ranks), so that a rank does not sit on tasks the others could have read. The Ask
// runs on the master thread (Note [Master calls]), and the same call then reads and checks the
// lease's tasks there (TaskFeed::ReadNow): on a machine with as many busy threads as cores, a
// feed thread started and woken per task took cores from the training threads, and a synchronous
// step waits for the rank that lost its core. The next Take that finds the answer in holds the
// tasks with their rows ready. From the Ask on the tasks count as held: Exchange waits for an
// answer still out (and its reading), so the next commit names them (Note [Task positions], step
// 2) and a new generation adopts them; their rows count as read only when Take hands them
// to a step. A worker that dies, or a generation that rolls back, before a commit named them
// leaves them pending in the store with no holder in any commit: the case of step 5 (tasks taken
// after the last commit and rolled back), where EndEpoch puts each back in todo. So each is read
// in exactly one committed update either way.
//
// Note [Master calls]
// Every call of the task master is a store transaction (a read and a compare-and-set, two round
// trips, to a store that on a busy machine answers when its thread gets a core), and the
// synchronous trainer waits for the slowest rank each step, so the prefetch Ask, with the Finish
// it carries (Note [Folded finish]), runs on a thread of its own while the training thread goes
// on. What it may not change is the order of the Note [Task positions] steps:
//  - A Finish follows the commit that consumed its tasks: only AfterCommit puts tasks in
//    unfinished_, and an Ask carries what unfinished_ held when it was made.
//  - At the epoch's tail (the last TakeStep found no sample on any rank) AfterCommit finishes on
//    the training thread: rank 0's EndEpoch, after the barrier that follows, must find every
//    used-up task done, or it would hand them out again.
//  - A Take that comes up short first waits for the Ask out, so no Ask is out when a step finds
//    no sample anywhere and EndEpoch runs (a task it handed to this rank is read first).
//  - StartGeneration waits for it and drops the answer (the rolled-back case above); a Finish it
//    carried that was not made is made by the task's adopter, which the commit tells that it was
//    used up.
//  - An error of the call fails the Take or Exchange that collects it.
//
// Note [Folded finish]
// A rank's used-up tasks are finished in the transaction of its next Ask (AskOptions::finish),
// not by a Finish call of their own: one store transaction per kTasksPerAsk tasks instead of an
// Ask and a Finish per task. The price is a later Finish, and so a longer time
// in which the rank can die with consumed tasks still pending in the store (Not covered (b) of
// Note [Task master]). Here that time is covered by the commit instead: AfterCommit moves the
// tasks the commit consumed from held_ to unfinished_, and every later Exchange names them again,
// used up, until the answer of an Ask that carried them is in. So the commit a new generation
// adopts names used up every task it consumed that the store may still hold pending, and step 4
// of Note [Task positions] finishes them; done() lists a task once however many commits name it.
// The carrying Ask is the next prefetch, about a lease's worth of steps later; at the epoch's
// tail none comes, and AfterCommit finishes at once.
absl::Status TaskData::Prefetch(int64_t epoch, int64_t n) {
  const int64_t open =
      std::count_if(held_.begin(), held_.end(), [](const Held& h) { return h.used < h.size(); });
  // One lease ahead at most: a rank holds at most 1 + kTasksPerAsk tasks with records left
  // (kMaxHeld counts on it).
  if (asking_.valid() || ahead_epoch_ == epoch || open > 1 ||
      RecordsHeld() >= 4 * std::max<int64_t>(n, 1)) {
    return absl::OkStatus();
  }
  asking_epoch_ = epoch;
  if (master_thread_ == nullptr) master_thread_ = std::make_unique<MasterThread>();
  // Reads on the master thread only the const members and the (thread-safe) index cache.
  asking_ =
      master_thread_->Run([this, epoch, worker = Worker(), ways = size_, finishing = unfinished_] {
        Asked asked{AskLease(*master_, epoch, worker, ways, finishing), {}, finishing};
        if (asked.answer.ok() && asked.answer->kind == data::TaskAnswer::kTask) {
          data::TaskFeedOptions fo;
          fo.index_cache = indexes_;
          std::vector<data::Task> lease = {asked.answer->task};
          lease.insert(lease.end(), asked.answer->more.begin(), asked.answer->more.end());
          for (const data::Task& task : lease) {
            absl::StatusOr<std::unique_ptr<data::TaskFeed>> feed =
                data::TaskFeed::ReadNow(RangeOf(task, 0), layout_, fo);
            // A bad layout fails StartFeed's Start again, on the training thread, where it is
            // reported.
            asked.feeds.push_back(feed.ok() ? *std::move(feed) : nullptr);
          }
        }
        return asked;
      });
  return absl::OkStatus();
}

void TaskData::Hold(const data::TaskAnswer& a, std::vector<std::unique_ptr<data::TaskFeed>> feeds) {
  feeds.resize(1 + a.more.size());
  held_.push_back(Held{a.task, 0, std::move(feeds[0])});
  for (size_t i = 0; i < a.more.size(); ++i) {
    held_.push_back(Held{a.more[i], 0, std::move(feeds[1 + i])});
  }
}

void TaskData::Finished(const std::vector<data::Task>& carried, const std::vector<bool>& accepted) {
  for (size_t i = 0; i < carried.size(); ++i) {
    const data::Task& t = carried[i];
    if (i < accepted.size() && !accepted[i]) {
      // Another rank adopted it: this worker was stopped and removed from the group.
      std::fprintf(stderr, "fashion_mnist --data=tasks: %s: finish of task %lld ignored (%s)\n",
                   Worker().c_str(), static_cast<long long>(t.id),
                   "taken over by a later generation");
    }
    unfinished_.erase(std::remove_if(unfinished_.begin(), unfinished_.end(),
                                     [&](const data::Task& u) {
                                       return u.id == t.id && u.generation == t.generation;
                                     }),
                      unfinished_.end());
  }
}

absl::Status TaskData::TakeAsked(bool wait) {
  if (!asking_.valid()) return absl::OkStatus();
  if (!wait && asking_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return absl::OkStatus();
  }
  Asked asked = asking_.get();
  ASSIGN_OR_RETURN(data::TaskAnswer a, std::move(asked.answer));
  Finished(asked.finishing, a.finished);
  if (a.kind != data::TaskAnswer::kTask) {
    ahead_epoch_ = asking_epoch_;  // none to spare now; Take still asks when it runs out
    return absl::OkStatus();
  }
  const size_t first = held_.size();
  Hold(a, std::move(asked.feeds));
  for (size_t i = first; i < held_.size(); ++i) RETURN_IF_ERROR(StartFeed(i));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TaskData::Take(int64_t epoch, int64_t step, int64_t n, Tensor* images,
                                       Tensor* labels) {
  ASSIGN_OR_RETURN(*images, Tensor::Empty({std::max<int64_t>(n, 1), 1, 28, 28}, DType::kFloat32));
  ASSIGN_OR_RETURN(*labels, Tensor::Empty({std::max<int64_t>(n, 1)}, DType::kInt64));
  Line line{epoch, step, rank_, {}};
  line.ids.reserve(static_cast<size_t>(n));
  float* px = images->data<float>();
  int64_t* lab = labels->data<int64_t>();
  RETURN_IF_ERROR(TakeAsked(/*wait=*/false));
  int64_t got = 0;
  size_t i = 0;  // held_[i]: the first task that may have records left
  while (got < n) {
    while (i < held_.size() && held_[i].used == held_[i].size()) ++i;
    if (i == held_.size()) {
      if (asking_.valid()) {  // a short Take leaves no Ask in flight (Note [Master calls])
        RETURN_IF_ERROR(TakeAsked(/*wait=*/true));
        continue;
      }
      const std::vector<data::Task> finishing = unfinished_;
      ASSIGN_OR_RETURN(data::TaskAnswer a, AskLease(*master_, epoch, Worker(), size_, finishing));
      Finished(finishing, a.finished);
      if (a.kind != data::TaskAnswer::kTask) break;  // kWait or kEpochDone: none left for us
      Hold(a, {});
      continue;
    }
    RETURN_IF_ERROR(StartFeed(i));
    Held& h = held_[i];
    ASSIGN_OR_RETURN(int64_t k,
                     h.feed->Take(n - got, px + got * kImageBytes, lab + got, &line.ids));
    if (k == 0) {
      return absl::DataLossError(absl::StrCat(
          "--data=tasks: task ", h.task.id, " (", set_.ShardPath(h.task.range.shard), " records [",
          h.task.range.begin, ", ", h.task.range.end, ")) ended after ", h.used, " records"));
    }
    h.used += k;
    got += k;
    if (h.used == h.size()) h.feed.reset();
  }
  if (got == n) RETURN_IF_ERROR(Prefetch(epoch, n));
  if (got < n) {  // a short batch at the end of the epoch
    // None at all: the dummy sample of Note [Task positions], step 5 (weighted 0).
    const int64_t rows = std::max<int64_t>(got, 1);
    if (got == 0) {
      std::fill(px, px + kImageBytes, 0.0f);
      lab[0] = 0;
    }
    ASSIGN_OR_RETURN(Tensor short_images, Tensor::Empty({rows, 1, 28, 28}, DType::kFloat32));
    ASSIGN_OR_RETURN(Tensor short_labels, Tensor::Empty({rows}, DType::kInt64));
    std::copy(px, px + rows * kImageBytes, short_images.data<float>());
    std::copy(lab, lab + rows, short_labels.data<int64_t>());
    *images = std::move(short_images);
    *labels = std::move(short_labels);
  }
  if (got > 0) lines_.push_back(std::move(line));
  return got;
}

absl::Status TaskData::Exchange(Communicator& comm, std::map<std::string, int64_t>& extras) {
  RETURN_IF_ERROR(TakeAsked(/*wait=*/true));  // the commit names every task asked for before it
  const int64_t max_share = Ceil(options_.global_batch, comm.world_size());
  const int64_t width = 2 + 3 * kMaxHeld + options_.commit_every * (3 + max_share);
  // Held tasks, then the used-up ones still unfinished (Note [Folded finish]).
  const auto num_held = static_cast<int64_t>(held_.size());
  const int64_t naming = num_held + static_cast<int64_t>(unfinished_.size());
  if (naming > kMaxHeld) {
    return absl::FailedPreconditionError(absl::StrCat("--data=tasks: rank ", comm.rank(), " holds ",
                                                      naming, " tasks at a commit (at most ",
                                                      kMaxHeld, "); raise --records-per-task"));
  }
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Zeros({width}, DType::kInt64));
  int64_t* b = mine.data<int64_t>();
  int64_t at = 0;
  b[at++] = naming;
  for (int64_t i = 0; i < kMaxHeld; ++i, at += 3) {
    if (i < num_held) {
      b[at] = held_[i].task.id;
      b[at + 1] = held_[i].task.generation;
      b[at + 2] = held_[i].used;
    } else if (i < naming) {
      const data::Task& t = unfinished_[static_cast<size_t>(i - num_held)];
      b[at] = t.id;
      b[at + 1] = t.generation;
      b[at + 2] = t.range.end - t.range.begin;
    }
  }
  b[at++] = static_cast<int64_t>(lines_.size());
  for (const Line& l : lines_) {
    if (at + 3 + static_cast<int64_t>(l.ids.size()) > width) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--data=tasks: rank ", comm.rank(), " has ", lines_.size(),
          " steps since its last commit, more than --commit-every=", options_.commit_every));
    }
    b[at++] = l.epoch;
    b[at++] = l.step;
    b[at++] = static_cast<int64_t>(l.ids.size());
    for (int64_t id : l.ids) b[at++] = id;
  }
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({width * comm.world_size()}, DType::kInt64));
  RETURN_IF_ERROR(comm.Allgather(mine, all)->Wait());
  const int64_t* a = all.data<int64_t>();
  InitExtras(extras);
  int64_t open = 0;
  committing_.clear();
  for (int r = 0; r < comm.world_size(); ++r) {
    const int64_t* p = a + r * width;
    const int64_t n = p[0];
    for (int64_t i = 0; i < n; ++i) {
      if (open == kMaxOpen) {
        return absl::FailedPreconditionError(
            absl::StrCat("--data=tasks: the ranks hold more than ", kMaxOpen,
                         " tasks at a commit; raise --records-per-task"));
      }
      extras[OpenKey(open, "id")] = p[1 + 3 * i];
      extras[OpenKey(open, "gen")] = p[2 + 3 * i];
      extras[OpenKey(open, "used")] = p[3 + 3 * i];
      ++open;
    }
    int64_t q = 1 + 3 * kMaxHeld;
    const int64_t lines = p[q++];
    for (int64_t l = 0; l < lines; ++l) {
      Line line{p[q], p[q + 1], r, {}};
      const int64_t count = p[q + 2];
      line.ids.assign(p + q + 3, p + q + 3 + count);
      q += 3 + count;
      committing_.push_back(std::move(line));
    }
  }
  extras["data/open"] = open;
  finishing_.clear();
  for (int64_t i = 0; i < open; ++i) {
    const int64_t id = extras[OpenKey(i, "id")];
    const data::TaskRange& r = master_->tasks()[static_cast<size_t>(id)];
    if (extras[OpenKey(i, "used")] == r.end - r.begin) finishing_.push_back(id);
  }
  return absl::OkStatus();
}

std::string TaskData::CommittingLedger() const {
  std::string text;
  for (const Line& l : committing_) {
    absl::StrAppendFormat(&text,
                          "{\"epoch\": %d, \"step\": %d, \"generation\": %d, \"rank\": %d, "
                          "\"samples\": [%s]}\n",
                          l.epoch, l.step, generation_, l.rank, absl::StrJoin(l.ids, ", "));
  }
  return text;
}

absl::Status TaskData::AppendLedger(const std::string& text) {
  if (ledger_ == nullptr || text.empty()) return absl::OkStatus();
  if (std::fwrite(text.data(), 1, text.size(), ledger_) != text.size() ||
      std::fflush(ledger_) != 0) {
    return absl::InternalError(
        absl::StrCat("--sample-ledger: write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TaskData::RestoreDone(int64_t epoch, std::vector<int64_t> done, bool restore_master) {
  if (restore_master) RETURN_IF_ERROR(master_->Restore(epoch, done));
  done_ = std::move(done);
  return absl::OkStatus();
}

absl::StatusOr<bool> TaskData::EndEpoch(int64_t epoch) { return master_->EndEpoch(epoch); }

void TaskData::EpochEnded() {
  done_.clear();
  if (!options_.sample_digest) return;
  const Digest d = digest_.epoch == step_epoch_ ? digest_ : Digest{step_epoch_, 0, 0};
  std::fprintf(stderr, "sample_digest epoch=%lld rank=%d count=%lld digest=%016llx\n",
               static_cast<long long>(d.epoch), rank_, static_cast<long long>(d.count),
               static_cast<unsigned long long>(d.sum));
  std::fflush(stderr);
  digest_ = Digest{};
}

// Note [Sample digest]
// A check of exactly-once that keeps nothing and sends nothing (--sample-digest), so that it also
// covers the static group's commit without an allgather (Note [Static task positions], step 1).
// AfterCommit adds every id of this rank's steps since the last commit, the ids its ledger lines
// carry (lines_: the records Take handed to a step; a rank's dummy row at the epoch's tail has no
// id), to a count and to a sum mod 2^64 of SampleMix(id). EpochEnded prints
//   sample_digest epoch=E rank=R count=C digest=HEX
// (E from 0 as in the ledger, HEX the sum in 16 hex digits) and starts the next epoch at 0. Over
// the ranks the counts add up to the epoch's samples and the sums to a fingerprint of their
// multiset: that of {0..N-1} when every sample was trained once, and with overwhelming
// probability another one when a sample is missing or repeated. Steps a new generation rolls back
// never reach AfterCommit, so they do not count. Not covered: a worker that dies or leaves
// mid-epoch takes its part along (the elastic ledger keeps it on the other ranks), and a resumed
// worker counts only the steps since the resume.
absl::Status TaskData::AfterCommit() {
  if (options_.sample_digest) {
    for (const Line& l : lines_) {
      if (l.epoch != digest_.epoch) digest_ = Digest{l.epoch, 0, 0};
      digest_.count += static_cast<int64_t>(l.ids.size());
      for (int64_t id : l.ids) digest_.sum += SampleMix(id);
    }
  }
  lines_.clear();
  if (ledger_ != nullptr) RETURN_IF_ERROR(AppendLedger(CommittingLedger()));
  committing_.clear();
  // A task still unfinished is named by every commit until it is done: done() lists it once.
  for (int64_t id : finishing_) {
    if (std::find(done_.begin(), done_.end(), id) == done_.end()) done_.push_back(id);
  }
  finishing_.clear();
  std::vector<Held> kept;
  for (Held& h : held_) {
    if (h.used == h.size()) {
      unfinished_.push_back(h.task);
    } else {
      kept.push_back(std::move(h));
    }
  }
  held_ = std::move(kept);
  // Note [Folded finish]: the next Ask finishes them. At the epoch's tail none comes, and rank 0's
  // EndEpoch, after a barrier, must find every used-up task done.
  if (!tail_ || unfinished_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(TakeAsked(/*wait=*/true));  // none is out at the tail; if one were, it goes first
  const std::vector<data::Task> finishing = unfinished_;
  ASSIGN_OR_RETURN(std::vector<bool> accepted, master_->Finish(finishing));
  Finished(finishing, accepted);
  return absl::OkStatus();
}

}  // namespace paddle::examples
