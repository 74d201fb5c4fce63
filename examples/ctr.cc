// Trains a click-through-rate model on the synthetic click data of tools/make-ctr-data, on one
// process or data-parallel under the launcher:
//
//   tools/make-ctr-data --out=/tmp/ctr --max-vocab=100000
//   bazel build --config=opt //examples:ctr
//   /usr/bin/python3 tools/launch.py --nproc=2 bazel-bin/examples/ctr --data=/tmp/ctr
//
// The model: the 26 categorical fields' embeddings (one table, the fields' ids offset into it)
// concatenated with the 13 dense features, then an MLP (--hidden, then --hidden/2, ReLU) and a
// two-logit output whose softmax is sigmoid(l1 - l0): binary cross-entropy on the click
// probability. The concatenation is never built: the first layer is Linear(embeddings) +
// Linear(dense, no bias), which is the same function as Linear(concat(embeddings, dense)).
//
// Where the embedding rows live is --table (Note [CTR embedding sources]):
//   replicated  every rank holds the whole table as a model parameter; its dense gradient is
//               averaged by DDP's allreduce with the MLP's (the simple baseline);
//   sparse      the same replicated table, its gradient the touched rows only (nn::Embedding's
//               sparse path), exchanged by DDP's reducer (issue 31 item 1);
//   sharded     paddle/parallel/sharded_embedding.h: rows sharded by id hash, looked up and
//               updated by all-to-all, each owner applying SGD to its rows (issue 31 item 2).
// The MLP is always replicated and averaged by DDP. Both optimizers are plain SGD (no momentum),
// so the three tables train the same model.
//
// --local-sgd=H (replicated or sparse table): each rank steps on its own gradients and the ranks
// average all parameters, the table included, every H steps (paddle/parallel/local_sgd.h), and
// once more before each evaluation so that every rank scores with the same model.
//
// Every epoch prints the test AUC and log loss over all ranks' shares of the test split
// (paddle/parallel/metrics.h), samples/s, and bytes this rank sent per step; the last stdout line
// is a JSON object with epoch, auc, log_loss, best_auc (the data set's, from its manifest),
// samples_per_s, world_size, bytes_per_step, table, train_loss, local_sgd. bytes_per_step counts
// what this rank hands to collectives: dense buckets' payload, the sparse exchange's bytes (ring
// model), the sharded table's all-to-all payload and local SGD's averages.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "examples/ctr_data.h"
#include "examples/ctr_model.h"
#include "examples/launched_group.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/deadline.h"
#include "paddle/core/status.h"
#include "paddle/data/distributed_sampler.h"
#include "paddle/nn/functional.h"
#include "paddle/ops/cpu/threading.h"
#include "paddle/optim/sgd.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/local_sgd.h"
#include "paddle/parallel/metrics.h"

namespace paddle::examples {
namespace {

constexpr char kUsage[] = R"(usage: ctr [--data=DIR] [flags]
  --data=DIR                 train.bin, test.bin and manifest.json from tools/make-ctr-data
                             (default: tools/make-ctr-data --max-vocab=100000, made on first use
                             into $PADDLE_CACHE_DIR)
  --table=replicated|sparse|sharded
                             where the embedding rows live and how their gradients travel
                             (default replicated)
  --epochs=N                 (default 3)
  --batch=N                  global batch, split across the workers, any count up to it
                             (default 256)
  --lr=X                     SGD learning rate of the MLP and the table (default 0.5)
  --dim=N                    embedding width (default 16)
  --hidden=N                 first hidden layer; the second has N/2 (default 128)
  --init-scale=X             initial embedding rows uniform in +-X (default 0.3)
  --train-samples=N          train on the first N samples only (default: all)
  --seed=N                   weights and shuffling (default 1)
  --threads=N                compute threads (default 1)
  --backend=native|gloo      collective backend when launched (default native)
  --local-sgd=H              average parameters every H steps instead of gradients every step
                             (replicated or sparse table; docs/local-sgd.md; default off)
Data-parallel when started by the launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
)";

struct Options {
  std::string data;
  std::string table = "replicated";
  int64_t epochs = 3;
  int64_t batch = 256;
  double lr = 0.5;
  int64_t dim = 16;
  int64_t hidden = 128;
  double init_scale = 0.3;
  int64_t train_samples = 0;
  int64_t seed = 1;
  int64_t threads = 1;
  std::string backend = "native";
  int64_t local_sgd = 0;  // H; 0: off
};

absl::Status ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (see --help)"));
    }
    std::string key = arg.substr(2, eq - 2);
    std::string value = arg.substr(eq + 1);
    bool ok = true;
    if (key == "data") {
      o->data = value;
    } else if (key == "table") {
      o->table = value;
    } else if (key == "backend") {
      o->backend = value;
    } else if (key == "epochs") {
      ok = absl::SimpleAtoi(value, &o->epochs) && o->epochs >= 1;
    } else if (key == "batch") {
      ok = absl::SimpleAtoi(value, &o->batch) && o->batch >= 1;
    } else if (key == "lr") {
      ok = absl::SimpleAtod(value, &o->lr) && o->lr > 0;
    } else if (key == "dim") {
      ok = absl::SimpleAtoi(value, &o->dim) && o->dim >= 1;
    } else if (key == "hidden") {
      ok = absl::SimpleAtoi(value, &o->hidden) && o->hidden >= 2;
    } else if (key == "init-scale") {
      ok = absl::SimpleAtod(value, &o->init_scale) && o->init_scale >= 0;
    } else if (key == "train-samples") {
      ok = absl::SimpleAtoi(value, &o->train_samples) && o->train_samples >= 0;
    } else if (key == "seed") {
      ok = absl::SimpleAtoi(value, &o->seed) && o->seed >= 0;
    } else if (key == "local-sgd") {
      ok = absl::SimpleAtoi(value, &o->local_sgd) && o->local_sgd >= 1;
    } else if (key == "threads") {
      ok = absl::SimpleAtoi(value, &o->threads) && o->threads >= 1;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", key, " (see --help)"));
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value in '", arg, "'"));
  }
  if (o->table != "replicated" && o->table != "sparse" && o->table != "sharded") {
    return absl::InvalidArgumentError(
        absl::StrCat("--table=", o->table, ": expected replicated, sparse or sharded"));
  }
  if (o->local_sgd > 0 && o->table == "sharded") {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-sgd=", o->local_sgd,
                     " needs --table=replicated or sparse: a sharded table has one copy of each "
                     "row, updated every step"));
  }
  return absl::OkStatus();
}

using Group = LaunchedGroup;

absl::Status JoinGroup(const Options& o, Group* g) {
  if (!StartedAsGroup()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Backend backend, ParseBackend(o.backend));
  RETURN_IF_ERROR(JoinLaunchedGroup(backend, g));
  if (o.batch < g->world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch=", o.batch, " (the global batch) is below the ", g->world,
        " workers: each needs a sample per step; pass --batch=", g->world, " or more"));
  }
  return absl::OkStatus();
}

// A batch of samples `index` of `data`, as the model's inputs.
struct Inputs {
  std::vector<int64_t> ids;  // [n * fields]
  Tensor dense;              // float32 [n, num_dense]
  std::vector<int64_t> labels;
};

absl::StatusOr<Inputs> Gather(const CtrData& data, absl::Span<const int64_t> index) {
  Inputs in;
  const int64_t n = static_cast<int64_t>(index.size());
  const int f = data.num_categorical, d = data.num_dense;
  in.ids.resize(n * f);
  in.labels.resize(n);
  ASSIGN_OR_RETURN(in.dense, Tensor::Empty({n, d}, DType::kFloat32));
  float* dense = in.dense.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = index[i];
    std::memcpy(&in.ids[i * f], &data.ids[s * f], sizeof(int64_t) * f);
    std::memcpy(dense + i * d, &data.dense[s * d], sizeof(float) * d);
    in.labels[i] = data.labels[s] > 0.5f ? 1 : 0;
  }
  return in;
}

absl::StatusOr<Tensor> LabelTensor(const std::vector<int64_t>& labels) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(labels.size())}, DType::kInt64));
  if (!labels.empty())
    std::memcpy(t.data<int64_t>(), labels.data(), sizeof(int64_t) * labels.size());
  return t;
}

struct EvalResult {
  double auc = 0, auc_bound = 0, log_loss = 0;
};

// Every rank scores its contiguous share of `test`; AUC and log loss are over all of them.
// The table's lookups are collective, so every rank runs the same number of batches (a rank out
// of samples looks up none).
absl::StatusOr<EvalResult> Evaluate(CtrModel& model, EmbeddingSource& table, const CtrData& test,
                                    Communicator* comm, int rank, int world, int64_t batch) {
  autograd::NoGradGuard no_grad;
  const int64_t share = (test.num_samples + world - 1) / world;
  const int64_t begin = std::min(test.num_samples, share * rank);
  const int64_t end = std::min(test.num_samples, begin + share);
  const int64_t batches = (share + batch - 1) / batch;
  ASSIGN_OR_RETURN(AucHistogram auc, AucHistogram::Create());
  ClassificationTotals totals;
  std::vector<int64_t> index;
  for (int64_t b = 0; b < batches; ++b) {
    index.clear();
    for (int64_t s = begin + b * batch; s < std::min(end, begin + (b + 1) * batch); ++s) {
      index.push_back(s);
    }
    ASSIGN_OR_RETURN(Inputs in, Gather(test, index));
    ASSIGN_OR_RETURN(autograd::Variable emb, table.Lookup(in.ids, /*train=*/false));
    if (index.empty()) continue;
    ASSIGN_OR_RETURN(autograd::Variable logits, model.Score(emb, autograd::Variable(in.dense)));
    const float* l = logits.data().data<float>();
    std::vector<float> scores(index.size());
    int64_t correct = 0;
    double loss = 0;
    for (size_t i = 0; i < index.size(); ++i) {
      const double margin = static_cast<double>(l[2 * i + 1]) - l[2 * i];  // logit of a click
      scores[i] = static_cast<float>(1.0 / (1.0 + std::exp(-margin)));
      const double signed_margin = in.labels[i] == 1 ? margin : -margin;
      loss += signed_margin > 0 ? std::log1p(std::exp(-signed_margin))
                                : -signed_margin + std::log1p(std::exp(signed_margin));
      correct += signed_margin > 0;
    }
    RETURN_IF_ERROR(auc.Add(scores, in.labels));
    RETURN_IF_ERROR(totals.Add(static_cast<int64_t>(index.size()), correct, loss));
  }
  if (comm != nullptr) {
    RETURN_IF_ERROR(auc.SumOverRanks(*comm));
    RETURN_IF_ERROR(totals.SumOverRanks(*comm));
  }
  EvalResult r;
  ASSIGN_OR_RETURN(r.auc, auc.Auc());
  r.auc_bound = auc.ErrorBound();
  ASSIGN_OR_RETURN(r.log_loss, totals.MeanLoss());
  return r;
}

int Run(const Options& o) {
  Group group;
  auto fail = [&group](const absl::Status& s) {
    std::fprintf(stderr, "ctr: %s\n", s.ToString().c_str());
    FailLaunchedGroup(s, &group);  // the peers quote it; the launcher hears of it now
    return 1;
  };
  ops::cpu::SetNumThreads(static_cast<int>(o.threads));
  std::string data_dir = o.data;
  if (data_dir.empty()) {  // every rank asks; one makes it, the others wait (dataset_cache.h)
    absl::StatusOr<std::string> cached = DefaultCtrData();
    if (!cached.ok()) return fail(cached.status());
    data_dir = *cached;
  }
  absl::StatusOr<CtrData> train = ReadCtrData(data_dir + "/train.bin");
  if (!train.ok()) return fail(train.status());
  absl::StatusOr<CtrData> test = ReadCtrData(data_dir + "/test.bin");
  if (!test.ok()) return fail(test.status());
  if (test->vocab != train->vocab || test->num_dense != train->num_dense) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--data=", data_dir, ": train.bin and test.bin have different fields (not one data set)")));
  }
  absl::StatusOr<double> best_auc = ReadBestAuc(data_dir);
  if (!best_auc.ok()) return fail(best_auc.status());
  const int64_t train_size =
      o.train_samples > 0 ? std::min(o.train_samples, train->num_samples) : train->num_samples;
  if (absl::Status st = JoinGroup(o, &group); !st.ok()) return fail(st);
  const bool leader = group.rank == 0;

  CtrModelOptions mo;
  mo.fields = train->num_categorical;
  mo.num_dense = train->num_dense;
  mo.dim = o.dim;
  mo.hidden = o.hidden;
  mo.table_rows = train->total_rows();
  mo.init_scale = static_cast<float>(o.init_scale);
  mo.seed = static_cast<uint64_t>(o.seed);
  mo.lr = static_cast<float>(o.lr);
  absl::StatusOr<CtrSetup> setup = MakeCtr(o.table, mo, group.comm.get());
  if (!setup.ok()) return fail(setup.status());
  CtrModel& model = *setup->model;
  EmbeddingSource& table = *setup->table;

  std::unique_ptr<DistributedDataParallel> ddp;
  if (group.comm) {
    DdpOptions ddp_options;
    ddp_options.store = group.rendezvous.store;
    absl::StatusOr<std::unique_ptr<DistributedDataParallel>> made =
        DistributedDataParallel::Create(setup->model, group.comm.get(), ddp_options);
    if (!made.ok()) return fail(made.status());
    ddp = *std::move(made);
  }
  std::unique_ptr<LocalSgd> local_sgd;
  if (ddp && o.local_sgd > 0) {
    LocalSgdOptions lo;
    lo.period = o.local_sgd;
    absl::StatusOr<std::unique_ptr<LocalSgd>> made =
        LocalSgd::Create(setup->model, group.comm.get(), lo, ddp.get());
    if (!made.ok()) return fail(made.status());
    local_sgd = *std::move(made);
  }
  // Bytes this rank has handed to collectives so far (see the header comment).
  auto bytes_sent = [&]() -> int64_t {
    int64_t b = table.BytesSent();
    if (ddp) b += ddp->reducer().stats().bytes_reduced + ddp->reducer().stats().sparse_bytes_sent;
    if (local_sgd) b += local_sgd->averaged_bytes();
    return b;
  };
  optim::SgdOptions so;
  so.lr = o.lr;
  absl::StatusOr<std::unique_ptr<optim::Sgd>> opt = optim::Sgd::Create(model.Parameters(), so);
  if (!opt.ok()) return fail(opt.status());
  // Each step covers the next --batch samples of the epoch's order, whatever the world size; a
  // rank's share is --batch / world, one more on the first --batch % world ranks (Note [Uneven
  // shares] in paddle/data/distributed_sampler.h).
  absl::StatusOr<data::DistributedSampler> sampler = data::DistributedSampler::Create(
      train_size, group.rank, group.world, static_cast<uint64_t>(o.seed), /*shuffle=*/true,
      /*drop_last=*/false, o.batch);
  if (!sampler.ok()) return fail(sampler.status());
  const int64_t local_batch = sampler->LocalBatch();

  if (leader) {
    std::printf(
        "ctr: table %s (%lld rows x %lld), MLP %lld parameters, %d workers, batch %lld, lr %g, "
        "%lld train / %lld test samples, best_auc %.4f\n",
        o.table.c_str(), static_cast<long long>(mo.table_rows), static_cast<long long>(o.dim),
        static_cast<long long>(model.NumParameters() - model.TableParameters()), group.world,
        static_cast<long long>(o.batch), o.lr, static_cast<long long>(train_size),
        static_cast<long long>(test->num_samples), *best_auc);
    std::fflush(stdout);
  }
  std::string last_json;
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    sampler->SetEpoch(epoch);
    const std::vector<int64_t> indices = sampler->Indices();
    const int64_t steps = (static_cast<int64_t>(indices.size()) + local_batch - 1) / local_batch;
    const int64_t bytes_before = bytes_sent();
    double loss_sum = 0;
    absl::Time start = absl::Now();
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t first = step * local_batch;
      const int64_t n =
          std::min<int64_t>(local_batch, static_cast<int64_t>(indices.size()) - first);
      absl::StatusOr<Inputs> in = Gather(*train, absl::MakeConstSpan(&indices[first], n));
      if (!in.ok()) return fail(in.status());
      absl::StatusOr<Tensor> labels = LabelTensor(in->labels);
      if (!labels.ok()) return fail(labels.status());
      (*opt)->ZeroGrad();
      absl::StatusOr<autograd::Variable> emb = table.Lookup(in->ids, /*train=*/true);
      if (!emb.ok()) return fail(emb.status());
      absl::StatusOr<autograd::Variable> logits = model.Score(*emb, autograd::Variable(in->dense));
      if (!logits.ok()) return fail(logits.status());
      absl::StatusOr<autograd::Variable> loss =
          nn::functional::SoftmaxCrossEntropy(*logits, *labels);
      if (!loss.ok()) return fail(loss.status());
      // This rank's mean loss weighted by its share of the step, n x world / --batch, so that
      // DDP's average over ranks is the step's mean (Note [Uneven shares]).
      absl::StatusOr<autograd::Variable> weighted = *loss;
      if (const double w = static_cast<double>(n) * group.world / static_cast<double>(o.batch);
          w != 1.0) {
        absl::StatusOr<Tensor> factor = Tensor::Empty(loss->shape(), DType::kFloat32);
        if (!factor.ok()) return fail(factor.status());
        factor->data<float>()[0] = static_cast<float>(w);
        weighted = nn::functional::Mul(*loss, autograd::Variable(*factor));
        if (!weighted.ok()) return fail(weighted.status());
      }
      absl::Status st = ddp ? ddp->Backward(*weighted) : weighted->Backward();
      if (st.ok()) st = table.AfterBackward();
      if (st.ok()) st = (*opt)->Step();
      if (st.ok() && local_sgd) st = local_sgd->AfterStep().status();
      if (!st.ok()) return fail(st);
      loss_sum += *loss->data().data<float>();
    }
    // With gradients averaged every step, rank 0's training time is the slowest worker's within
    // one step; the evaluation is not counted.
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const int64_t bytes = bytes_sent() - bytes_before;
    if (local_sgd) {  // one model on every rank before scoring (not counted in the step bytes)
      if (absl::Status st = local_sgd->Synchronize(); !st.ok()) return fail(st);
    }
    absl::StatusOr<EvalResult> eval =
        Evaluate(model, table, *test, group.comm.get(), group.rank, group.world, local_batch * 4);
    if (!eval.ok()) return fail(eval.status());
    const double rate = seconds > 0 ? static_cast<double>(sampler->TotalSize()) / seconds : 0;
    const double bytes_per_step = steps > 0 ? static_cast<double>(bytes) / steps : 0;
    const double train_loss = steps > 0 ? loss_sum / steps : 0;  // rank 0's batches
    if (!leader) continue;
    std::printf(
        "epoch %lld/%lld  train_loss %.4f  test auc %.4f (+-%.1e, best %.4f)  log_loss %.4f  "
        "samples/s %.0f  bytes/step %.0f  epoch_time %.2fs\n",
        static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), train_loss, eval->auc,
        eval->auc_bound, *best_auc, eval->log_loss, rate, bytes_per_step, seconds);
    std::fflush(stdout);
    last_json = absl::StrFormat(
        "{\"epoch\": %d, \"auc\": %.5f, \"log_loss\": %.5f, \"best_auc\": %.5f, "
        "\"samples_per_s\": %.1f, \"world_size\": %d, \"bytes_per_step\": %.0f, \"table\": "
        "\"%s\", \"train_loss\": %.5f, \"local_sgd\": %d}",
        epoch + 1, eval->auc, eval->log_loss, *best_auc, rate, group.world, bytes_per_step, o.table,
        train_loss, static_cast<int>(o.local_sgd));
  }
  // The verdict on the job's collectives, its last one's included (Note [Ring stamp]).
  if (group.comm) {
    if (absl::Status st = group.comm->Shutdown(); !st.ok()) return fail(st);
  }
  if (leader) std::printf("%s\n", last_json.c_str());
  return 0;
}

}  // namespace
}  // namespace paddle::examples

int main(int argc, char** argv) {
  paddle::examples::Options options;
  absl::Status s = paddle::examples::ParseOptions(argc, argv, &options);
  if (!s.ok()) {
    std::fprintf(stderr, "ctr: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return paddle::examples::Run(options);
}
