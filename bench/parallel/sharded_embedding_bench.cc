// Time and bytes of one training step of the distributed lookup table (Lookup + Backward of
// paddle/parallel/sharded_embedding.h): W ranks as threads over the native communicator, each
// with its own Zipf-distributed ids, against the bytes a dense allreduce of the whole table and
// an allgather of every rank's sparse rows (issue 31 item 1's exchange) would send.
//
//   bazel run -c opt --config=opt //bench/parallel:sharded_embedding_bench -- --world=4
//       --rows=1000000 --dim=16 --ids=4096 --zipf=1.05 --steps=30
//
// Prints one line per setting and a JSON line. Checks its results: the first lookup returns every
// row's initial value, and after training the looked-up rows are finite and have moved.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "paddle/parallel/sharded_embedding.h"

namespace paddle {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Flags {
  int world = 4;
  int64_t rows = 1000000;
  int64_t dim = 16;
  int64_t ids = 4096;
  double zipf = 1.05;
  int steps = 30;
  int warmup = 3;
};

// Zipf(s) over ranks 1..rows by inverse CDF; rank k maps to id (k * 7919 + 12345) mod rows (a
// bijection, so hot ids spread over the table and over the owners).
class Zipf {
 public:
  Zipf(int64_t rows, double s) : cdf_(rows), rows_(rows) {
    double sum = 0;
    for (int64_t k = 0; k < rows; ++k) cdf_[k] = (sum += std::pow(static_cast<double>(k + 1), -s));
    for (double& c : cdf_) c /= sum;
  }
  int64_t Draw(uint64_t h) const {
    const double u = static_cast<double>(Mix(h) >> 11) * 0x1p-53;
    const int64_t k = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return static_cast<int64_t>(
        (static_cast<unsigned __int128>(std::min(k, rows_ - 1)) * 7919 + 12345) % rows_);
  }

 private:
  std::vector<double> cdf_;
  int64_t rows_;
};

absl::Status RankMain(const Flags& f, const Zipf& zipf, Communicator* comm, double* seconds,
                      ShardedEmbedding::Stats* stats, double* unique_ids) {
  ShardedEmbeddingOptions o;
  o.name = "bench";
  o.num_rows = f.rows;
  o.dim = f.dim;
  o.seed = 1;
  o.optimizer.kind = RowOptimizerKind::kAdagrad;
  o.optimizer.lr = 0.05f;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedEmbedding> table, ShardedEmbedding::Create(comm, o));
  const int rank = comm->rank();
  std::vector<int64_t> ids(f.ids);
  ASSIGN_OR_RETURN(Tensor grad, Tensor::Empty({f.ids, f.dim}, DType::kFloat32));
  ASSIGN_OR_RETURN(Tensor flag, Tensor::Zeros({1}, DType::kFloat32));
  // Ids drawn before timing, so the step time is the table's alone.
  std::vector<std::vector<int64_t>> all_ids(f.warmup + f.steps, std::vector<int64_t>(f.ids));
  double unique_sum = 0;
  for (int step = 0; step < f.warmup + f.steps; ++step) {
    absl::flat_hash_set<int64_t> unique;
    for (int64_t i = 0; i < f.ids; ++i) {
      all_ids[step][i] =
          zipf.Draw((static_cast<uint64_t>(step) << 40) ^ (static_cast<uint64_t>(rank) << 32) ^ i);
      unique.insert(all_ids[step][i]);
    }
    if (step >= f.warmup) unique_sum += unique.size();
  }
  ShardedEmbedding::Stats before;
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < f.warmup + f.steps; ++step) {
    if (step == f.warmup) {
      RETURN_IF_ERROR(comm->Allreduce(flag, ReduceOp::kSum)->Wait());  // start together
      before = table->stats();
      start = std::chrono::steady_clock::now();
    }
    ids = all_ids[step];
    ASSIGN_OR_RETURN(Tensor rows, table->Lookup(ids));
    if (step == 0) {  // never-trained rows hold their initial value
      std::vector<float> want(f.dim);
      for (int64_t i = 0; i < f.ids; i += 97) {
        ShardedEmbedding::InitialRow(o.seed, ids[i], o.init_scale, absl::MakeSpan(want));
        if (!std::equal(want.begin(), want.end(), rows.data<float>() + i * f.dim)) {
          return absl::InternalError(
              absl::StrCat("first lookup of id ", ids[i], " is not initial"));
        }
      }
    }
    for (int64_t k = 0; k < f.ids * f.dim; ++k)
      grad.data<float>()[k] = rows.data<float>()[k] + 0.01f;
    RETURN_IF_ERROR(table->Backward(ids, grad));
  }
  RETURN_IF_ERROR(comm->Allreduce(flag, ReduceOp::kSum)->Wait());
  *seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / f.steps;
  stats->lookup_bytes_sent =
      (table->stats().lookup_bytes_sent - before.lookup_bytes_sent) / f.steps;
  stats->backward_bytes_sent =
      (table->stats().backward_bytes_sent - before.backward_bytes_sent) / f.steps;
  *unique_ids = unique_sum / f.steps;
  // Trained rows moved and are finite.
  ASSIGN_OR_RETURN(Tensor rows, table->Lookup(ids));
  std::vector<float> init(f.dim);
  ShardedEmbedding::InitialRow(o.seed, ids[0], o.init_scale, absl::MakeSpan(init));
  for (int64_t k = 0; k < f.ids * f.dim; ++k) {
    if (!std::isfinite(rows.data<float>()[k])) return absl::InternalError("non-finite row");
  }
  if (rows.data<float>()[0] == init[0]) return absl::InternalError("hot row did not move");
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = true;
    if (key == "--world")
      ok = absl::SimpleAtoi(value, &f.world);
    else if (key == "--rows")
      ok = absl::SimpleAtoi(value, &f.rows);
    else if (key == "--dim")
      ok = absl::SimpleAtoi(value, &f.dim);
    else if (key == "--ids")
      ok = absl::SimpleAtoi(value, &f.ids);
    else if (key == "--zipf")
      ok = absl::SimpleAtod(value, &f.zipf);
    else if (key == "--steps")
      ok = absl::SimpleAtoi(value, &f.steps);
    else
      ok = false;
    if (!ok || f.world < 1 || f.rows < 1 || f.dim < 1 || f.ids < 1 || f.steps < 1) {
      std::fprintf(stderr, "bad flag %s; flags: --world --rows --dim --ids --zipf --steps\n",
                   a.c_str());
      return 2;
    }
  }
  const Zipf zipf(f.rows, f.zipf);
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Communicator>> comms(f.world);
  std::vector<absl::Status> status(f.world);
  std::vector<double> seconds(f.world), unique(f.world);
  std::vector<ShardedEmbedding::Stats> stats(f.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.world; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions o;
      o.store = store;
      o.rank = r;
      o.world_size = f.world;
      absl::StatusOr<std::unique_ptr<Communicator>> c = Communicator::Create(o);
      if (!c.ok()) {
        status[r] = c.status();
        return;
      }
      comms[r] = std::move(*c);
      status[r] = RankMain(f, zipf, comms[r].get(), &seconds[r], &stats[r], &unique[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < f.world; ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, status[r].ToString().c_str());
      return 1;
    }
  }
  double sec = 0, lookup = 0, backward = 0, u = 0;
  for (int r = 0; r < f.world; ++r) {
    sec = std::max(sec, seconds[r]);
    lookup += stats[r].lookup_bytes_sent / static_cast<double>(f.world);
    backward += stats[r].backward_bytes_sent / static_cast<double>(f.world);
    u += unique[r] / f.world;
  }
  const double n = f.world;
  const double dense = 2 * (n - 1) / n * f.rows * f.dim * 4;  // ring allreduce, sent per rank
  const double allgather = (n - 1) * u * (8 + 4 * f.dim);     // every rank's unique rows to all
  std::printf(
      "world %d rows %lld dim %lld ids/rank %lld zipf %.2f: step (lookup+backward) %.3f ms, "
      "unique ids/rank %.0f, bytes sent/rank/step: lookup %.0f + backward %.0f = %.0f; "
      "sparse allgather %.0f; dense allreduce %.0f\n",
      f.world, static_cast<long long>(f.rows), static_cast<long long>(f.dim),
      static_cast<long long>(f.ids), f.zipf, sec * 1e3, u, lookup, backward, lookup + backward,
      allgather, dense);
  std::printf(
      "{\"world_size\": %d, \"rows\": %lld, \"dim\": %lld, \"ids_per_rank\": %lld, \"zipf\": %.2f, "
      "\"step_ms\": %.3f, \"unique_ids_per_rank\": %.0f, \"lookup_bytes\": %.0f, "
      "\"backward_bytes\": %.0f, \"sparse_allgather_bytes\": %.0f, \"dense_allreduce_bytes\": "
      "%.0f}\n",
      f.world, static_cast<long long>(f.rows), static_cast<long long>(f.dim),
      static_cast<long long>(f.ids), f.zipf, sec * 1e3, u, lookup, backward, allgather, dense);
  return 0;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) { return paddle::Main(argc, argv); }
