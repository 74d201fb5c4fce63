// Note [Store barrier]
// Keys, all under the barrier's name N:
//   N/arrived/<rank>  created by each rank as it arrives, with a token unique to the call
//   N/done            "ok" once complete, or "abort <rank>: <reason>"; everyone waits on it
// Rank 0 completes the barrier: it waits until every N/arrived/<r> exists, then writes N/done.
// There is deliberately no shared arrival counter: on stores whose Add is an optimistic
// transaction (etcd), N ranks incrementing one key at once cost O(N^2) retried transactions,
// while N distinct keys cost O(N) writes. Creating the arrival key with CompareSet also catches a
// rank arriving twice (two processes given one rank, or a reused barrier name).
// An abort and rank 0's completion both write N/done with CompareSet from "", so the first of
// them decides the outcome for everyone. Rank 0 waits for the arrival keys in growing slices and
// checks N/done in between, so an abort reaches it within a second too.
#include "paddle/collective/rendezvous/store_barrier.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "paddle/core/deadline.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr absl::string_view kOk = "ok";
constexpr absl::string_view kAbort = "abort ";

// Distinguishes this call's arrival from another process's claim on the same rank.
std::string UniqueToken() {
  static std::atomic<uint64_t> counter{0};
  absl::BitGen gen;
  return absl::StrCat(getpid(), ".", counter.fetch_add(1), ".",
                      absl::Hex(absl::Uniform<uint64_t>(gen)));
}

std::string ArrivedKey(absl::string_view name, int rank) {
  return absl::StrCat(name, "/arrived/", rank);
}

// "barrier 'rdzv/join' (rank 2 of 4) on TCPStore 127.0.0.1:29500"
std::string Where(const Store& store, absl::string_view name, int rank, int world_size) {
  return absl::StrFormat("barrier '%s' (rank %d of %d) on %s", name, rank, world_size,
                         store.Describe());
}

// The timeout error, listing the ranks whose arrival key is missing.
absl::Status MissingRanksError(Store& store, absl::string_view name, int rank, int world_size,
                               const Deadline& deadline) {
  std::vector<int> missing;
  absl::Status checked;
  for (int r = 0; r < world_size && checked.ok(); ++r) {
    absl::StatusOr<bool> arrived = store.Check({ArrivedKey(name, r)});
    checked = arrived.status();
    if (arrived.ok() && !*arrived) missing.push_back(r);
  }
  absl::Status timeout = deadline.TimeoutError(Where(store, name, rank, world_size));
  if (!checked.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(
        timeout.message(), "; could not tell which ranks are missing: ", checked.ToString()));
  }
  constexpr size_t kMaxListed = 64;  // enough to spot the pattern (one host? every 8th rank?)
  std::string listed =
      absl::StrJoin(missing.begin(), missing.begin() + std::min(missing.size(), kMaxListed), ", ");
  if (missing.size() > kMaxListed) absl::StrAppend(&listed, ", ...");
  return absl::DeadlineExceededError(absl::StrFormat(
      "%s waiting for %d of %d rank(s) that never arrived: [%s]; check that those processes "
      "were started, point at the same store, and are not stuck before this point, or pass a "
      "longer timeout",
      timeout.message(), missing.size(), world_size, listed));
}

}  // namespace

absl::Status StoreBarrier(Store& store, absl::string_view name, int rank, int world_size,
                          absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: rank %d is out of range for world_size %d",
                        Where(store, name, rank, world_size), rank, world_size));
  }
  Deadline deadline = Deadline::After(timeout);
  const std::string done_key = absl::StrCat(name, "/done");
  const std::string token = UniqueToken();
  ASSIGN_OR_RETURN(std::string holder, store.CompareSet(ArrivedKey(name, rank), "", token));
  if (holder != token) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: rank %d arrived twice; two processes were given rank %d, or the barrier name was "
        "reused",
        Where(store, name, rank, world_size), rank, rank));
  }

  if (rank == 0) {
    std::vector<std::string> arrivals;
    for (int r = 0; r < world_size; ++r) arrivals.push_back(ArrivedKey(name, r));
    absl::Duration slice = absl::Milliseconds(50);
    while (true) {
      absl::Status all = store.Wait(arrivals, std::min(slice, deadline.Remaining()));
      if (all.ok()) {
        RETURN_IF_ERROR(store.CompareSet(done_key, "", kOk).status());
        break;
      }
      if (!absl::IsDeadlineExceeded(all))
        return Annotate(all, Where(store, name, rank, world_size));
      ASSIGN_OR_RETURN(bool decided, store.Check({done_key}));  // aborted meanwhile?
      if (decided) break;
      if (deadline.Expired()) return MissingRanksError(store, name, rank, world_size, deadline);
      slice = std::min(slice * 2, absl::Seconds(1));
    }
  }

  absl::StatusOr<std::string> done = store.Get(done_key, deadline.Remaining());
  if (absl::IsDeadlineExceeded(done.status())) {
    return MissingRanksError(store, name, rank, world_size, deadline);
  }
  if (!done.ok()) return Annotate(done.status(), Where(store, name, rank, world_size));
  if (*done == kOk) return absl::OkStatus();
  absl::string_view reason(*done);
  if (!absl::ConsumePrefix(&reason, kAbort)) {
    return absl::InternalError(absl::StrFormat("%s: unexpected value \"%s\" in %s",
                                               Where(store, name, rank, world_size), *done,
                                               done_key));
  }
  return absl::AbortedError(
      absl::StrFormat("%s: aborted by rank %s", Where(store, name, rank, world_size), reason));
}

absl::Status AbortStoreBarrier(Store& store, absl::string_view name, int rank,
                               absl::string_view reason) {
  return store.CompareSet(absl::StrCat(name, "/done"), "", absl::StrCat(kAbort, rank, ": ", reason))
      .status();
}

}  // namespace paddle
