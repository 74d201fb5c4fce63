// ElasticGroup: generations of members formed through the job's store.
//
// Note [Elastic rendezvous]
// Generation g lives under "<prefix>/g<g>/". A worker joining it:
//  a) gives up at once if "<prefix>/done" exists (the job has finished: kCancelled), and moves on
//     to g+1 if "g<g>/closed" exists (it came too late);
//  b) takes a slot, s = Add("g<g>/arrived", 1), and publishes its last commit step under
//     "g<g>/member/<s>";
//  c) waits for "g<g>/closed". Members that hold state close it with CompareSet (the first one
//     wins; the value is the member count N) when max_size have arrived, or the `expected`
//     members the caller named, or `settle` has passed since the last arrival; never with fewer
//     than min_size. Workers without state (fresh from the launcher) close only generation 0, the
//     start of the job (after `start_settle`): later generations are closed by survivors, so
//     newcomers cannot form a group of their own while the job runs elsewhere;
//  d) if s > N it came too late: on to g+1. Else it reads the N members' commit steps and ranks
//     them: highest commit step first, then slot. Rank 0 thus holds the newest commit, which
//     every member adopts by broadcast (Note [Elastic commit] in elastic_state.cc);
//  e) builds the generation's communicator with keys under "g<g>/comm".
// Running members learn of waiting workers at AgreeOnChange: rank 0 reads "g<g+1>/arrived" and
// an allreduce (sum) of [leaving flags of every rank, waiting count, the caller's addend] gives
// every rank the same answer. Every wait is bounded by join_timeout.
// Old keys: every member records the keys it writes for a generation (its own rendezvous keys and
// everything its communicator writes, through a recording wrapper of the store) and, once it has
// joined generation g, deletes those of g-2 and older: no live member reads them any more (a
// slow worker aiming at an old generation sees "latest" past it and gives up on it, step f).
// The last two generations' keys of a member that leaves or dies stay behind (a few each).
//  f) a worker that finds "<prefix>/latest" past g (before taking a slot, or while waiting) moves
//     on: g has formed without it.
#include "paddle/parallel/elastic.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(10);

// The job's store, recording the keys written through it (Note [Elastic rendezvous], old keys).
class RecordingStore : public Store {
 public:
  explicit RecordingStore(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    Record(key);
    return store_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    return store_->Get(key, timeout);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    Record(key);
    return store_->Add(key, delta);
  }
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override {
    Record(key);
    return store_->CompareSet(key, expected, desired);
  }
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override {
    return store_->Wait(keys, timeout);
  }
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
    return store_->Check(keys);
  }
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override { return store_->DeleteKey(key); }
  absl::StatusOr<int64_t> NumKeys() override { return store_->NumKeys(); }
  std::string Describe() const override { return store_->Describe(); }

  std::vector<std::string> TakeKeys() {
    absl::MutexLock lock(&mu_);
    return std::move(keys_);
  }

 private:
  void Record(absl::string_view key) {
    absl::MutexLock lock(&mu_);
    keys_.emplace_back(key);
  }
  std::shared_ptr<Store> store_;
  absl::Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<int64_t> ParseInt(const std::string& text, absl::string_view what) {
  int64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::DataLossError(absl::StrCat("elastic rendezvous: ", what, " holds '", text,
                                            "', not an integer; is another job using the store?"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ElasticGroup>> ElasticGroup::Create(ElasticOptions options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("ElasticGroup: options.store is required");
  }
  if (options.min_size < 1 || options.max_size < options.min_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ElasticGroup: need 1 <= min_size <= max_size, got min_size %d, "
                        "max_size %d",
                        options.min_size, options.max_size));
  }
  return std::unique_ptr<ElasticGroup>(new ElasticGroup(std::move(options)));
}

ElasticGroup::~ElasticGroup() { Leave(); }

std::string ElasticGroup::Key(int64_t generation, absl::string_view name) const {
  return absl::StrCat(options_.prefix, "/g", generation, "/", name);
}

absl::StatusOr<bool> ElasticGroup::Done() {
  return options_.store->Check({absl::StrCat(options_.prefix, "/done")});
}

absl::Status ElasticGroup::MarkDone() {
  return options_.store->Set(absl::StrCat(options_.prefix, "/done"), "1");
}

void ElasticGroup::Leave(const absl::Status& cause) {
  if (comm_ == nullptr) return;
  if (!cause.ok()) comm_->Abort(cause);
  // Joins its threads and closes its connections, unless a holder of shared_comm() still has
  // it: then that holder's last reference does (no abort here, which would fail the peers of a
  // planned change).
  comm_.reset();
}

absl::StatusOr<Membership> ElasticGroup::Join(int64_t commit_step, int expected) {
  Leave();
  Deadline deadline = Deadline::After(options_.join_timeout);
  Store& store = *options_.store;
  int64_t g = membership_.generation + 1;
  if (!joined_once_) {  // start at the newest generation anyone has formed
    const std::string latest = absl::StrCat(options_.prefix, "/latest");
    ASSIGN_OR_RETURN(bool exists, store.Check({latest}));
    g = 0;
    if (exists) {
      ASSIGN_OR_RETURN(std::string text, store.Get(latest, deadline.Remaining()));
      ASSIGN_OR_RETURN(g, ParseInt(text, latest));
    }
  }
  while (true) {
    absl::StatusOr<Membership> m = TryJoin(g, commit_step, expected, deadline);
    if (m.ok()) {
      if (joined_once_) ++changes_;
      joined_once_ = true;
      membership_ = *m;
      DeleteOldKeys(m->generation);
      return m;
    }
    if (!absl::IsOutOfRange(m.status())) return m.status();
    ++g;  // closed without us: the next one
  }
}

absl::StatusOr<Membership> ElasticGroup::TryJoin(int64_t g, int64_t commit_step, int expected,
                                                 const Deadline& deadline) {
  Store& store = *options_.store;
  const std::string closed_key = Key(g, "closed");
  auto done_or_late = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(bool done, Done());
    if (done) return absl::CancelledError("the elastic job has finished");
    return absl::OkStatus();
  };
  // f) a generation past g has formed: g is history (its keys may be gone).
  const std::string latest_key = absl::StrCat(options_.prefix, "/latest");
  auto passed = [&]() -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(bool exists, store.Check({latest_key}));
    if (!exists) return false;
    ASSIGN_OR_RETURN(std::string text, store.Get(latest_key, deadline.Remaining()));
    ASSIGN_OR_RETURN(int64_t latest, ParseInt(text, latest_key));
    return latest > g;
  };
  RETURN_IF_ERROR(done_or_late());
  ASSIGN_OR_RETURN(bool closed, store.Check({closed_key}));
  if (closed) return absl::OutOfRangeError("closed");
  ASSIGN_OR_RETURN(bool gone, passed());
  if (gone) return absl::OutOfRangeError("passed");
  // b) a slot, and this member's commit step.
  std::vector<std::string>& written = written_[g];
  written.push_back(Key(g, "arrived"));
  ASSIGN_OR_RETURN(int64_t slot, store.Add(Key(g, "arrived"), 1));
  written.push_back(Key(g, absl::StrCat("member/", slot)));
  RETURN_IF_ERROR(store.Set(Key(g, absl::StrCat("member/", slot)), absl::StrCat(commit_step)));
  // c) wait until the generation closes; close it when the rule says so.
  const bool may_close = commit_step >= 0 || g == 0;
  const absl::Duration settle = commit_step >= 0 ? options_.settle : options_.start_settle;
  int64_t last_count = -1;
  absl::Time last_change = absl::Now();
  while (true) {
    ASSIGN_OR_RETURN(closed, store.Check({closed_key}));
    if (closed) break;
    RETURN_IF_ERROR(done_or_late());
    ASSIGN_OR_RETURN(gone, passed());
    if (gone) return absl::OutOfRangeError("passed");
    ASSIGN_OR_RETURN(int64_t n, store.Add(Key(g, "arrived"), 0));
    if (n != last_count) last_count = n, last_change = absl::Now();
    // Never below min_size, whatever `expected` says: a lone survivor (or a split of the group)
    // waits for company rather than train, and take data tasks, on its own.
    if (may_close && n >= options_.min_size &&
        (n >= options_.max_size || (expected > 0 && n >= expected) ||
         absl::Now() - last_change >= settle)) {
      written.push_back(closed_key);
      RETURN_IF_ERROR(store.CompareSet(closed_key, "", absl::StrCat(n)).status());
      break;
    }
    if (deadline.Expired()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "elastic rendezvous on %s: generation %d did not form within %s (%d worker(s) "
          "arrived, min_size %d, expected %d%s); raise the join timeout or check that the "
          "launcher restarts workers",
          store.Describe(), g, absl::FormatDuration(deadline.Elapsed()), n, options_.min_size,
          expected,
          may_close ? "" : "; this worker has no state and waits for the running members"));
    }
    absl::SleepFor(kPoll);
  }
  ASSIGN_OR_RETURN(std::string closed_text, store.Get(closed_key, deadline.Remaining()));
  ASSIGN_OR_RETURN(int64_t size, ParseInt(closed_text, closed_key));
  if (slot > size) return absl::OutOfRangeError("late");
  // d) ranks: newest commit first, then slot.
  std::vector<std::pair<int64_t, int64_t>> members;  // (-commit step, slot)
  for (int64_t s = 1; s <= size; ++s) {
    const std::string key = Key(g, absl::StrCat("member/", s));
    absl::StatusOr<std::string> text = store.Get(key, deadline.Remaining());
    if (!text.ok()) {
      return Annotate(text.status(),
                      absl::StrFormat("elastic rendezvous, generation %d: member %d of %d took a "
                                      "slot but never published its state (it died?)",
                                      g, s, size));
    }
    ASSIGN_OR_RETURN(int64_t step, ParseInt(*text, key));
    members.emplace_back(-step, s);
  }
  std::sort(members.begin(), members.end());
  Membership m;
  m.generation = g;
  m.size = static_cast<int>(size);
  m.root_commit_step = -members[0].first;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == slot) m.rank = static_cast<int>(i);
  }
  {  // an optimization for newcomers: where to start looking
    const std::string latest = absl::StrCat(options_.prefix, "/latest");
    RETURN_IF_ERROR(store.Set(latest, absl::StrCat(g)));
  }
  // e) this generation's communicator.
  CommunicatorOptions co = options_.comm;
  auto recording = std::make_shared<RecordingStore>(options_.store);
  co.store = recording;
  co.store_prefix = Key(g, "comm");
  co.rank = m.rank;
  co.world_size = m.size;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(co);
  if (!comm.ok()) {
    return Annotate(comm.status(),
                    absl::StrFormat("elastic generation %d: rank %d of %d", g, m.rank, m.size));
  }
  comm_ = *std::move(comm);
  for (std::string& key : recording->TakeKeys()) written.push_back(std::move(key));
  PADDLE_LOG(INFO, INIT) << "elastic generation " << g << ": rank " << m.rank << " of " << m.size
                         << " (commit step " << commit_step << ", adopting step "
                         << m.root_commit_step << ")";
  return m;
}

void ElasticGroup::DeleteOldKeys(int64_t g) {
  while (!written_.empty() && written_.begin()->first <= g - 2) {
    for (const std::string& key : written_.begin()->second) {
      absl::StatusOr<bool> deleted = options_.store->DeleteKey(key);
      if (!deleted.ok()) {  // only a leak: say so and go on
        PADDLE_LOG(WARN, INIT) << "elastic: could not delete old key " << key << ": "
                               << deleted.status();
      }
    }
    written_.erase(written_.begin());
  }
}

absl::StatusOr<bool> ElasticGroup::JobStarted() {
  return options_.store->Check({absl::StrCat(options_.prefix, "/latest")});
}

absl::StatusOr<MembershipChange> ElasticGroup::AgreeOnChange(bool leaving, double* sum) {
  if (comm_ == nullptr) return absl::FailedPreconditionError("AgreeOnChange: not in a group");
  const int n = comm_->world_size();
  // [leave flag of each rank (only that rank sets it), workers waiting (only rank 0), sum]: a
  // sum over ranks gives every entry exactly (small integers are exact in float64).
  std::vector<double> flags(n + 2, 0);
  flags[comm_->rank()] = leaving ? 1 : 0;
  if (sum != nullptr) flags[n + 1] = *sum;
  if (comm_->rank() == 0) {
    const std::string next = Key(membership_.generation + 1, "arrived");
    ASSIGN_OR_RETURN(bool waiting, options_.store->Check({next}));
    if (waiting) {
      ASSIGN_OR_RETURN(int64_t arrived, options_.store->Add(next, 0));
      flags[n] = static_cast<double>(arrived);
    }
  }
  ASSIGN_OR_RETURN(Tensor t,
                   Tensor::FromBlob(flags.data(), {n + 2}, DType::kFloat64, Device::Cpu()));
  RETURN_IF_ERROR(comm_->Allreduce(t, ReduceOp::kSum)->Wait());
  if (sum != nullptr) *sum = flags[n + 1];
  MembershipChange change;
  change.joiners = static_cast<int>(flags[n]);
  for (int r = 0; r < n; ++r) {
    if (flags[r] != 0) change.leavers.push_back(r);
  }
  return change;
}

}  // namespace paddle
