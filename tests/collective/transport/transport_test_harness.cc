// Transport test helpers; see transport_test_harness.h.
#include "tests/collective/transport/transport_test_harness.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/logging.h"
#include "paddle/core/philox.h"

namespace paddle {

namespace {

constexpr uint64_t kSeed = 0x5eed2024;

// Philox turns (seed, rank, index) into the message's key; a SplitMix64 stream over the key
// fills the bytes, fast enough to make and check gigabytes in an unoptimized test build.
void FillPayload(char* data, size_t bytes, int rank, uint64_t index) {
  Philox::Block key_words = Philox(kSeed, (static_cast<uint64_t>(rank) << 32) | index).BlockAt(0);
  const uint64_t key = (static_cast<uint64_t>(key_words[1]) << 32) | key_words[0];
  for (size_t offset = 0; offset < bytes; offset += 8) {
    uint64_t z = key + (offset / 8 + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(data + offset, &z, std::min<size_t>(8, bytes - offset));
  }
}

}  // namespace

const std::vector<char>& Payload(int rank, uint64_t index, size_t bytes) {
  static std::mutex mu;
  static auto* cache = new std::map<std::tuple<int, uint64_t, size_t>, std::vector<char>>();
  std::lock_guard<std::mutex> lock(mu);
  std::vector<char>& payload = (*cache)[{rank, index, bytes}];
  if (payload.size() != bytes) {
    payload.resize(bytes);
    FillPayload(payload.data(), bytes, rank, index);
  }
  return payload;
}

std::string Mismatch(const std::vector<char>& got, int rank, uint64_t index) {
  const std::vector<char>& want = Payload(rank, index, got.size());
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  size_t at = 0;
  while (got[at] == want[at]) ++at;
  return absl::StrCat("message ", index, " from rank ", rank, " (", got.size(),
                      " bytes) differs first at byte ", at);
}

void ThreadBarrier::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  int generation = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  auto passed = [&] { return generation != generation_ || broken_; };
  if (!cv_.wait_for(lock, absl::ToChronoSeconds(kLongWait), passed)) {
    ADD_FAILURE() << "a rank thread waited " << kLongWait << " at a barrier";
    broken_ = true;
    cv_.notify_all();
  }
}

void ThreadBarrier::Break() {
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  cv_.notify_all();
}

void RunRankThreads(int world, const TransportFactory& factory,
                    const std::function<void(RankContext&)>& body,
                    const RankThreadsOptions& options) {
  std::shared_ptr<Store> store = options.store ? options.store : std::make_shared<HashStore>();
  ThreadBarrier barrier(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      ScopedLogRank log_rank(rank, world);
      TransportOptions transport_options;
      transport_options.rank = rank;
      transport_options.world_size = world;
      transport_options.store = store;
      transport_options.interface_name = options.interface_name;
      transport_options.connect_timeout = kLongWait;
      absl::StatusOr<std::unique_ptr<Transport>> transport = factory(transport_options);
      RankContext ctx{rank, world, nullptr, &barrier};
      if (!transport.ok()) {
        ADD_FAILURE() << "rank " << rank << ": " << transport.status();
      } else {
        ctx.transport = std::move(*transport);
        body(ctx);
      }
      if (testing::Test::HasFailure()) barrier.Break();
      barrier.Wait();
      ctx.transport.reset();
    });
  }
  for (auto& thread : threads) thread.join();
}

std::vector<WorkerProcess> StartWorkerProcesses(const std::vector<std::vector<std::string>>& args,
                                                const std::string& program) {
  std::vector<ChildSpec> specs(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    specs[i].argv = {program};
    specs[i].argv.insert(specs[i].argv.end(), args[i].begin(), args[i].end());
  }
  return StartChildren(specs);
}

void WaitForWorkerProcesses(std::vector<WorkerProcess>& workers, absl::Duration limit) {
  const int killed = WaitForChildren(workers, limit);
  if (killed > 0) {
    ADD_FAILURE() << killed << " worker process(es) still running after " << limit << "; killed";
  }
}

}  // namespace paddle
