// Sparse gradient exchange (Note [Sparse exchange]) against a dense allreduce of the same table:
// ranks as threads over the native communicator; per step, each rank's gradient has --ids lookups
// drawn Zipf(1.1)-like from --rows rows. Prints entries, bytes each rank sends (ring model) and
// milliseconds per step for both ways, and checks the exchanged gradient equals the dense average
// on the touched rows. Run optimized:
//   bazel run --config=opt //bench/parallel:sparse_exchange_bench -- 4 1000000 16 4096 5
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/parallel/reducer/sparse_exchange.h"

namespace paddle {
namespace {

struct Flags {
  int world = 4;
  int64_t rows = 1000000, dim = 16, ids = 4096;
  int steps = 5;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rank `rank`'s gradient of step `step`: ids ~ rows * u^3 (heavy head), rows from Philox.
autograd::SparseRows Grad(const Flags& f, int step, int rank) {
  autograd::SparseRows g;
  g.num_rows = f.rows;
  g.ids = Tensor::Empty({f.ids}, DType::kInt64).value();
  g.rows = Tensor::Empty({f.ids, f.dim}, DType::kFloat32).value();
  Philox p(step, rank);
  for (int64_t i = 0; i < f.ids; ++i) {
    const double u = p.NextDouble();
    g.ids.data<int64_t>()[i] = static_cast<int64_t>(u * u * u * static_cast<double>(f.rows));
  }
  for (int64_t i = 0; i < g.rows.numel(); ++i) g.rows.data<float>()[i] = p.NextFloat() - 0.5f;
  return g;
}

absl::Status RankMain(const Flags& f, Communicator* comm, double* sparse_s, double* dense_s,
                      SparseExchangeStats* stats) {
  autograd::Variable table(Tensor::Zeros({f.rows, f.dim}, DType::kFloat32).value(), true, "t");
  table.set_sparse(true);
  std::vector<std::pair<std::string, autograd::Variable>> params{{"t", table}};
  ASSIGN_OR_RETURN(Tensor dense, Tensor::Empty({f.rows * f.dim}, DType::kFloat32));
  for (int step = -1; step < f.steps; ++step) {  // step -1: warm-up
    const autograd::SparseRows g = Grad(f, step + 1, comm->rank());
    RETURN_IF_ERROR(table.set_sparse_grad(g));
    const double t0 = Now();
    ASSIGN_OR_RETURN(SparseExchangeStats s,
                     ExchangeSparseGradients(params, comm, absl::ZeroDuration()));
    const double t1 = Now();
    ASSIGN_OR_RETURN(Tensor d, autograd::SparseRowsToDense(g));
    ASSIGN_OR_RETURN(d, d.View({f.rows * f.dim}));
    const double t2 = Now();
    RETURN_IF_ERROR(comm->Allreduce(d, ReduceOp::kAvg)->Wait());
    const double t3 = Now();
    if (step < 0) continue;
    *sparse_s += t1 - t0;
    *dense_s += t3 - t2;
    stats->bytes_sent += s.bytes_sent;
    stats->entries += s.entries;
    stats->dense_fallbacks += s.dense_fallbacks;
    // Check: the exchanged rows are the dense average's rows.
    const autograd::SparseRows* out = table.sparse_grad();
    for (int64_t k = 0; k < out->size(); ++k) {
      const int64_t id = out->ids.data<int64_t>()[k];
      for (int64_t j = 0; j < f.dim; ++j) {
        const float a = out->rows.data<float>()[k * f.dim + j];
        const float b = d.data<float>()[id * f.dim + j];
        if (std::abs(a - b) > 1e-5f * (1 + std::abs(b))) {
          return absl::InternalError(absl::StrCat("row ", id, " col ", j, ": ", a, " vs ", b));
        }
      }
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  if (argc > 1) f.world = std::atoi(argv[1]);
  if (argc > 2) f.rows = std::atoll(argv[2]);
  if (argc > 3) f.dim = std::atoll(argv[3]);
  if (argc > 4) f.ids = std::atoll(argv[4]);
  if (argc > 5) f.steps = std::atoi(argv[5]);
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Communicator>> comms(f.world);
  std::vector<absl::Status> status(f.world);
  std::vector<double> sparse_s(f.world), dense_s(f.world);
  std::vector<SparseExchangeStats> stats(f.world);
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
      status[r] = RankMain(f, comms[r].get(), &sparse_s[r], &dense_s[r], &stats[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < f.world; ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, status[r].ToString().c_str());
      return 1;
    }
  }
  const SparseExchangeChoice dense_cost =
      ChooseSparseExchange(0, f.rows, f.dim, 4, f.world);  // dense_bytes does not depend on E
  const double w = f.world;
  std::printf(
      "{\"world\": %d, \"rows\": %lld, \"dim\": %lld, \"ids_per_rank\": %lld, "
      "\"entries_per_step\": "
      "%.0f, \"sparse_bytes_per_rank_step\": %.0f, \"dense_allreduce_bytes_per_rank_step\": %.0f, "
      "\"dense_table_allreduce_bytes_per_rank_step\": %.0f, \"dense_fallbacks\": %lld, "
      "\"sparse_ms\": %.2f, \"dense_ms\": %.2f}\n",
      f.world, static_cast<long long>(f.rows), static_cast<long long>(f.dim),
      static_cast<long long>(f.ids), static_cast<double>(stats[0].entries) / f.steps,
      static_cast<double>(stats[0].bytes_sent) / f.steps,
      static_cast<double>(dense_cost.dense_bytes), 2.0 * (w - 1) / w * f.rows * f.dim * 4,
      static_cast<long long>(stats[0].dense_fallbacks), 1e3 * sparse_s[0] / f.steps,
      1e3 * dense_s[0] / f.steps);
  return 0;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) { return paddle::Main(argc, argv); }
