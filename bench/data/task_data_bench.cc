// task_data_bench: the cost of `--data=tasks` and the speed of recovering a dead worker's task.
//
//   bazel run --config=opt //tools:make_shards -- --out=/tmp/fm --fashion-mnist
//   bazel run --config=opt //bench/data:task_data_bench -- --shards=/tmp/fm
//
// 1. Throughput: one process reads `--epochs` epochs of Fashion-MNIST's training split as
//    normalized float32 batches of `--batch`, (a) with the in-memory DataLoader (the data set
//    loaded once, gathered on its prefetch thread) and (b) through the task master (on a real
//    TCPStore) and TaskFeed: ask (the next task ahead of need), stream the task's records
//    (CRC-checked) and decode them on the feed's thread, copy batches out, finish. Both checksum
//    what they produce, and every sample must be seen once per epoch. Reports samples/s of each
//    and their ratio.
// 2. Re-hand-out: worker A takes a task and dies; worker B asks every `--poll-ms`. The time from
//    A's hand-out to B receiving the same task is the task timeout (here --timeout-ms, as if
//    observed) plus up to one poll; reported as p50 / p95 over `--trials`.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/status.h"
#include "paddle/data/data_loader.h"
#include "paddle/data/distributed_sampler.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/data/shard_reader.h"
#include "paddle/data/shard_set.h"
#include "paddle/data/task_feed.h"
#include "paddle/data/task_master.h"

namespace paddle {
namespace data {
namespace {

struct Flags {
  std::string shards;
  int64_t epochs = 3, batch = 64, records_per_task = 1000, trials = 20, poll_ms = 20;
  int64_t timeout_ms = 500;
};

absl::StatusOr<std::unique_ptr<TcpStore>> Client(int port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  return TcpStore::Connect(o);
}

// (a) The in-memory DataLoader.
absl::StatusOr<double> InMemory(const Flags& f, double* checksum) {
  ASSIGN_OR_RETURN(Dataset d, LoadFashionMnist(Split::kTrain));
  ASSIGN_OR_RETURN(DistributedSampler sampler, DistributedSampler::Create(d.size(), 0, 1, 1));
  ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader, DataLoader::Create(d, sampler, f.batch));
  absl::Time start = absl::Now();
  for (int64_t e = 0; e < f.epochs; ++e) {
    loader->StartEpoch(e);
    while (true) {
      ASSIGN_OR_RETURN(std::optional<Batch> b, loader->Next());
      if (!b) break;
      *checksum += b->images.data<float>()[0] + static_cast<double>(b->labels.data<int64_t>()[0]);
    }
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// (b) Tasks from the store, records from the shards, as fashion_mnist --data=tasks reads them:
// each task's records decoded on its TaskFeed's thread, the next task asked for and its feed
// started while the current one is read (Note [Task prefetch] in examples/fashion_mnist_tasks.cc),
// the shards' indexes read once.
absl::StatusOr<double> FromTasks(const Flags& f, int port, double* checksum) {
  ASSIGN_OR_RETURN(ShardSet set, LoadShardSet(f.shards));
  if (set.RecordBytes() != 8 + 1 + 784) {
    return absl::InvalidArgumentError(f.shards + " does not hold Fashion-MNIST shards");
  }
  ASSIGN_OR_RETURN(std::vector<TaskRange> tasks, MakeTasks(set.record_counts, f.records_per_task));
  ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, Client(port));
  TaskMasterOptions options;
  options.key = "bench/throughput";
  ASSIGN_OR_RETURN(std::unique_ptr<TaskMaster> master,
                   TaskMaster::Create(store.get(), tasks, options));
  TaskFeedLayout layout;
  layout.record_bytes = set.RecordBytes();
  layout.label_offset = 0;
  layout.image_offset = 1;
  layout.image_bytes = 784;
  layout.mean = kFashionMnistMean;
  layout.std = kFashionMnistStd;
  TaskFeedOptions feed_options;
  feed_options.index_cache = std::make_shared<ShardIndexCache>();
  struct Held {
    Task task;
    std::unique_ptr<TaskFeed> feed;
  };
  // Asks for a task and starts its feed; false when the epoch has none left.
  auto ask = [&](int64_t epoch, std::deque<Held>& held) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(TaskAnswer a, master->Ask(epoch, "bench"));
    if (a.kind == TaskAnswer::kEpochDone) return false;
    if (a.kind == TaskAnswer::kWait) return false;  // the other tasks are ours, in `held`
    ASSIGN_OR_RETURN(
        std::unique_ptr<TaskFeed> feed,
        TaskFeed::Start({set.ShardPath(a.task.range.shard), a.task.range.begin, a.task.range.end},
                        layout, feed_options));
    held.push_back(Held{a.task, std::move(feed)});
    return true;
  };
  std::vector<float> images(static_cast<size_t>(f.batch) * 784);
  std::vector<int64_t> labels(static_cast<size_t>(f.batch));
  std::vector<int64_t> ids;
  std::vector<int> seen(static_cast<size_t>(set.NumRecords()));
  absl::Time start = absl::Now();
  for (int64_t e = 0; e < f.epochs; ++e) {
    std::deque<Held> held;
    ASSIGN_OR_RETURN(bool more, ask(e, held));
    while (!held.empty()) {
      if (held.size() == 1 && more) {  // the next task, ahead of need
        ASSIGN_OR_RETURN(more, ask(e, held));
      }
      int64_t got = 0;
      ids.clear();
      while (got < f.batch && !held.empty()) {
        ASSIGN_OR_RETURN(int64_t k, held.front().feed->Take(f.batch - got, &images[got * 784],
                                                            &labels[got], &ids));
        got += k;
        if (got < f.batch) {  // the task is used up
          ASSIGN_OR_RETURN(std::vector<bool> ok, master->Finish({held.front().task}));
          if (!ok[0]) return absl::InternalError("a finish was ignored");
          held.pop_front();
          if (held.empty() && more) {
            ASSIGN_OR_RETURN(more, ask(e, held));
          }
        }
      }
      for (int64_t id : ids) ++seen[static_cast<size_t>(id)];
      if (got > 0) *checksum += images[0] + static_cast<double>(labels[0]);
    }
    ASSIGN_OR_RETURN(TaskAnswer a, master->Ask(e, "bench"));
    if (a.kind != TaskAnswer::kEpochDone) return absl::InternalError("epoch not done");
  }
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != f.epochs) {
      return absl::InternalError(absl::StrCat("sample ", i, " seen ", seen[i], " times"));
    }
  }
  return seconds;
}

absl::Status ReHandOut(const Flags& f, int port) {
  std::vector<double> ms;
  for (int64_t t = 0; t < f.trials; ++t) {
    ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> sa, Client(port));
    ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> sb, Client(port));
    TaskMasterOptions options;
    options.key = absl::StrCat("bench/rehandout/", t);
    options.initial_timeout = absl::Milliseconds(f.timeout_ms);
    options.min_timeout = absl::Milliseconds(1);
    std::vector<TaskRange> tasks = {{0, 0, 10}};
    ASSIGN_OR_RETURN(std::unique_ptr<TaskMaster> a, TaskMaster::Create(sa.get(), tasks, options));
    ASSIGN_OR_RETURN(std::unique_ptr<TaskMaster> b, TaskMaster::Create(sb.get(), tasks, options));
    ASSIGN_OR_RETURN(TaskAnswer held, a->Ask(0, "a"));
    absl::Time died = absl::Now();
    a.reset();
    sa.reset();  // worker A is gone, holding the task
    while (true) {
      ASSIGN_OR_RETURN(TaskAnswer got, b->Ask(0, "b"));
      if (got.kind == TaskAnswer::kTask) {
        if (got.task.id != held.task.id) return absl::InternalError("another task?");
        ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - died));
        break;
      }
      absl::SleepFor(absl::Milliseconds(f.poll_ms));
    }
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double q) { return ms[std::min(ms.size() - 1, size_t(q * ms.size()))]; };
  std::cout << "re-hand-out after a worker's death (timeout " << f.timeout_ms << " ms, poll "
            << f.poll_ms << " ms, " << ms.size() << " trials): p50 " << pct(0.5) << " ms, p95 "
            << pct(0.95) << " ms\n";
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    bool ok = true;
    if (kv.first == "--shards") {
      f.shards = kv.second;
    } else if (kv.first == "--epochs") {
      ok = absl::SimpleAtoi(kv.second, &f.epochs) && f.epochs > 0;
    } else if (kv.first == "--batch") {
      ok = absl::SimpleAtoi(kv.second, &f.batch) && f.batch > 0;
    } else if (kv.first == "--records-per-task") {
      ok = absl::SimpleAtoi(kv.second, &f.records_per_task) && f.records_per_task > 0;
    } else if (kv.first == "--trials") {
      ok = absl::SimpleAtoi(kv.second, &f.trials) && f.trials > 0;
    } else if (kv.first == "--poll-ms") {
      ok = absl::SimpleAtoi(kv.second, &f.poll_ms) && f.poll_ms > 0;
    } else if (kv.first == "--timeout-ms") {
      ok = absl::SimpleAtoi(kv.second, &f.timeout_ms) && f.timeout_ms > 0;
    } else {
      ok = false;
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad flag ", argv[i]));
  }
  if (f.shards.empty()) return absl::InvalidArgumentError("--shards=DIR is required");
  ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> server,
                   TcpStoreServer::Start(TcpStoreServerOptions()));
  double c1 = 0, c2 = 0;
  ASSIGN_OR_RETURN(double mem, InMemory(f, &c1));
  ASSIGN_OR_RETURN(double tasks, FromTasks(f, server->port(), &c2));
  const double n = 60000.0 * static_cast<double>(f.epochs);
  std::cout << "in-memory DataLoader: " << n / mem << " samples/s; tasks + shards: " << n / tasks
            << " samples/s; ratio " << mem / tasks << " (checksums " << c1 << ", " << c2 << ")\n";
  return ReHandOut(f, server->port());
}

}  // namespace
}  // namespace data
}  // namespace paddle

int main(int argc, char** argv) {
  absl::Status s = paddle::data::Run(argc, argv);
  if (!s.ok()) {
    std::cerr << "task_data_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
