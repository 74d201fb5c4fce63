// TcpStore throughput and latency: SET, GET and ADD with 1, 16 and 64 client connections (one
// thread and one TcpStore each) against one TcpStoreServer in this process.
//
//   bazel run -c opt //bench/micro:store_bench -- [--seconds=2] [--value_bytes=64]
//
// Prints per op and client count: ops/s over all clients, and p50/p99 latency of single calls.
// Every answer is checked (GET returns what was set, the ADD total is exact), so a fast wrong
// store cannot post a good number.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"

namespace paddle {
namespace {

enum class BenchOp { kSet, kGet, kAdd };

const char* Name(BenchOp op) {
  switch (op) {
    case BenchOp::kSet:
      return "set";
    case BenchOp::kGet:
      return "get";
    case BenchOp::kAdd:
      return "add";
  }
  return "?";
}

struct Result {
  double ops_per_sec = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t ops = 0;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "store_bench: %s\n", what.c_str());
  std::exit(1);
}

constexpr int kKeysPerThread = 64;

std::string KeyOf(int clients, int thread, int i) {
  return absl::StrCat("bench/", clients, "/", thread, "/", i % kKeysPerThread);
}

Result Run(BenchOp op, std::vector<std::unique_ptr<TcpStore>>& stores, absl::Duration duration,
           const std::string& value) {
  const int n = static_cast<int>(stores.size());
  std::string counter = absl::StrCat("bench/", n, "/counter/", Name(op));
  std::vector<std::vector<int64_t>> latencies(n);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      TcpStore& store = *stores[t];
      auto one = [&](int i) -> bool {
        switch (op) {
          case BenchOp::kSet:
            return store.Set(KeyOf(n, t, i), value).ok();
          case BenchOp::kGet:
            return store.Get(KeyOf(n, t, i), absl::Seconds(30)).value_or("") == value;
          case BenchOp::kAdd:
            return store.Add(counter, 1).ok();
        }
        return false;
      };
      // Warm-up: also creates the keys GET reads.
      for (int i = 0; i < 2 * kKeysPerThread; ++i) {
        if (op == BenchOp::kGet ? !store.Set(KeyOf(n, t, i), value).ok() : !one(i)) {
          failed = true;
        }
      }
      ++ready;
      while (!go.load()) std::this_thread::yield();
      std::vector<int64_t>& lat = latencies[t];
      lat.reserve(1 << 16);
      absl::Time end = absl::Now() + duration;
      for (int i = 0; absl::Now() < end; ++i) {
        absl::Time start = absl::Now();
        if (!one(i)) {
          failed = true;
          return;
        }
        lat.push_back(absl::ToInt64Nanoseconds(absl::Now() - start));
      }
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  absl::Time start = absl::Now();
  go = true;
  for (std::thread& th : threads) th.join();
  double wall = absl::ToDoubleSeconds(absl::Now() - start);
  if (failed)
    Die(absl::StrCat(Name(op), " with ", n, " clients returned an error or a wrong value"));

  std::vector<int64_t> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  if (all.empty()) Die("no operations completed");
  if (op == BenchOp::kAdd) {
    // Warm-up adds plus timed adds must all have landed exactly once.
    int64_t expected = static_cast<int64_t>(all.size()) + int64_t{n} * 2 * kKeysPerThread;
    std::string got = stores[0]->Get(counter, absl::Seconds(30)).value_or("?");
    if (got != absl::StrCat(expected)) {
      Die(absl::StrCat("ADD total is ", got, ", expected ", expected));
    }
  }
  std::sort(all.begin(), all.end());
  Result r;
  r.ops = static_cast<int64_t>(all.size());
  r.ops_per_sec = static_cast<double>(all.size()) / wall;
  r.p50_us = all[all.size() / 2] / 1e3;
  r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)] / 1e3;
  return r;
}

int Main(int argc, char** argv) {
  double seconds = 2;
  int value_bytes = 64;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    bool ok = true;
    if (absl::ConsumePrefix(&arg, "--seconds=")) {
      ok = absl::SimpleAtod(arg, &seconds) && seconds > 0;
    } else if (absl::ConsumePrefix(&arg, "--value_bytes=")) {
      ok = absl::SimpleAtoi(arg, &value_bytes) && value_bytes >= 0;
    } else {
      ok = false;
    }
    if (!ok) Die(absl::StrCat("bad argument '", argv[i], "'; use --seconds=S --value_bytes=N"));
  }
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start({});
  if (!server.ok()) Die(server.status().ToString());
  std::string value(static_cast<size_t>(value_bytes), 'v');
  std::printf("TcpStore on 127.0.0.1:%d, %d-byte values, %.1fs per measurement, %u CPUs\n",
              (*server)->port(), value_bytes, seconds, std::thread::hardware_concurrency());
  std::printf("%-4s %8s %12s %10s %10s %10s\n", "op", "clients", "ops/s", "p50(us)", "p99(us)",
              "ops");
  for (int clients : {1, 16, 64}) {
    std::vector<std::unique_ptr<TcpStore>> stores;
    for (int c = 0; c < clients; ++c) {
      TcpStoreOptions o;
      o.host = "127.0.0.1";
      o.port = (*server)->port();
      absl::StatusOr<std::unique_ptr<TcpStore>> s = TcpStore::Connect(o);
      if (!s.ok()) Die(s.status().ToString());
      stores.push_back(std::move(*s));
    }
    for (BenchOp op : {BenchOp::kSet, BenchOp::kGet, BenchOp::kAdd}) {
      Result r = Run(op, stores, absl::Seconds(seconds), value);
      std::printf("%-4s %8d %12.0f %10.1f %10.1f %10lld\n", Name(op), clients, r.ops_per_sec,
                  r.p50_us, r.p99_us, static_cast<long long>(r.ops));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) { return paddle::Main(argc, argv); }
