// Rendezvous workers: this very binary re-executed through child_processes.h.
#include "paddle/testing/rendezvous_worker.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/collective/rendezvous/store_barrier.h"

namespace paddle {

bool MaybeRunWorker(int argc, char** argv, int* exit_code) {
  if (argc < 4 || std::strcmp(argv[1], kWorkerFlag) != 0) return false;
  double seconds = 0;
  if (!absl::SimpleAtod(argv[3], &seconds)) {
    std::fprintf(stderr, "bad worker timeout \"%s\"\n", argv[3]);
    *exit_code = 2;
    return true;
  }
  *exit_code = RunRendezvousWorker(argv[2], absl::Seconds(seconds));
  return true;
}

int RunRendezvousWorker(const std::string& url, absl::Duration timeout) {
  absl::Time start = absl::Now();
  absl::StatusOr<RendezvousResult> result = Rendezvous(url, timeout);
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!result.ok()) {
    std::printf("RENDEZVOUS_ERROR %s\n", result.status().ToString().c_str());
    std::fflush(stdout);
    return 1;
  }
  Store& store = *result->store;
  const int rank = result->rank;
  const int n = result->world_size;
  // Every rank publishes a value and reads its neighbour's after a barrier.
  absl::Status s = store.Set(absl::StrCat("worker/value/", rank), absl::StrCat("v", rank));
  if (s.ok()) s = StoreBarrier(store, "worker/published", rank, n, timeout);
  if (s.ok()) {
    absl::StatusOr<std::string> peer = store.Get(absl::StrCat("worker/value/", (rank + 1) % n));
    if (!peer.ok()) {
      s = peer.status();
    } else if (*peer != absl::StrCat("v", (rank + 1) % n)) {
      s = absl::InternalError(absl::StrCat("rank ", rank, " read \"", *peer, "\" from its peer"));
    }
  }
  // Rank 0 may host the store: it leaves only after everyone else is done with it.
  if (s.ok() && rank != 0) s = store.Set(absl::StrCat("worker/left/", rank), "");
  if (s.ok() && rank == 0) {
    std::vector<std::string> left;
    for (int r = 1; r < n; ++r) left.push_back(absl::StrCat("worker/left/", r));
    s = store.Wait(left, timeout);
  }
  if (!s.ok()) {
    std::printf("RENDEZVOUS_ERROR after rendezvous: %s\n", s.ToString().c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("RENDEZVOUS_OK rank=%d world_size=%d seconds=%.6f start_us=%lld end_us=%lld\n", rank,
              n, seconds, static_cast<long long>(absl::ToUnixMicros(start)),
              static_cast<long long>(absl::ToUnixMicros(start + absl::Seconds(seconds))));
  std::fflush(stdout);
  return 0;
}

std::vector<WorkerOutcome> RunWorkerProcesses(const std::vector<WorkerSpec>& specs,
                                              absl::Duration limit) {
  const std::string self = SelfPath();
  std::vector<ChildSpec> children(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    children[i].argv = {self, kWorkerFlag, specs[i].url,
                        absl::StrCat(absl::ToDoubleSeconds(specs[i].timeout))};
    children[i].env = specs[i].env;
  }
  std::vector<ChildProcess> done = RunChildren(children, limit);
  std::vector<WorkerOutcome> outcomes(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    outcomes[i].exit_code = done[i].exit_code;
    outcomes[i].output = done[i].Output();
  }
  return outcomes;
}

double RendezvousField(const std::string& output, absl::string_view field) {
  size_t at = output.find("RENDEZVOUS_OK");
  if (at == std::string::npos) return -1;
  at = output.find(absl::StrCat(" ", field, "="), at);
  if (at == std::string::npos) return -1;
  at += field.size() + 2;
  double value = -1;
  size_t end = output.find_first_of(" \n", at);
  if (!absl::SimpleAtod(output.substr(at, end - at), &value)) return -1;
  return value;
}

}  // namespace paddle
