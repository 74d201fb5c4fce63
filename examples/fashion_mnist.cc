// Trains a Fashion-MNIST classifier, on one process or data-parallel on many: a tour of the
// training stack (paddle/nn models, paddle/optim optimizers and schedules, paddle/data readers,
// paddle/checkpoint, paddle/parallel DistributedDataParallel).
//
//   bazel run -c opt //examples:fashion_mnist -- --model=cnn --epochs=3 --threads=2
//   bazel run -c opt //tools:launch -- --nproc=4 //examples:fashion_mnist --model=cnn --epochs=3
//
// Started by the launcher (WORLD_SIZE set) it joins the group through env://, shares each step's
// global --batch over the workers (unevenly where their number does not divide it), shards the
// data with a DistributedSampler and averages gradients with DDP;
// rank 0 prints, evaluates and writes checkpoints, and its JSON adds world_size and
// comm_wait_fraction (time waiting for gradient allreduces over the epoch's training time).
//
// Prints one line per epoch (train loss, test accuracy, samples/s, epoch time); the last line on
// stdout is a JSON object with the keys epoch, train_loss, test_accuracy, samples_per_s,
// epoch_time_s (plus param_hash, a fingerprint of the final parameters, so two runs can be
// compared bitwise). With --checkpoint-dir it saves a checkpoint every --checkpoint-every steps
// and at the end of every epoch; --resume continues from the newest good one there (data-parallel:
// the one rank 0 picks, on every rank), at the same sample, with the same optimizer, learning-rate
// and dropout state, so an interrupted run ends with the same parameters as an uninterrupted one.
//
// --shard-optimizer keeps only this rank's slice of the optimizer state (ZeRO-1,
// paddle/parallel/zero_redundancy_optimizer.h) in place of DDP: it checks the ranks' parameters,
// broadcasts rank 0's and averages the gradients by reduce-scatter. The JSON adds
// optimizer_state_bytes (rank 0's) and peak_rss_mb (rank 0's ru_maxrss).
//
// --device=cuda (or cuda:N) moves the model to that GPU (Module::To) and copies each batch there,
// so forward, loss, backward and the SGD step run on the GPU; scalars (the loss, the logits for
// accuracy) are copied back to print. Data-parallel runs then default to backend=nccl, one GPU per
// rank (plain "cuda" means cuda:LOCAL_RANK). --amp=bf16 computes Linear layers in bf16 with fp32
// master weights (Note [bf16 autocast] in paddle/nn/functional_cuda.h). The JSON adds "device".
#include "paddle/data/fashion_mnist.h"

#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "examples/fashion_mnist_elastic.h"
#include "examples/fashion_mnist_metrics.h"
#include "examples/fashion_mnist_optimizer.h"
#include "examples/fashion_mnist_task_group.h"
#include "examples/fashion_mnist_tasks.h"
#include "examples/launched_group.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/checkpoint/checkpoint_agreement.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/rendezvous/rendezvous.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/deadline.h"
#include "paddle/core/device.h"
#include "paddle/core/metrics_pusher.h"
#include "paddle/core/metrics_registry.h"
#include "paddle/core/status.h"
#include "paddle/data/data_loader.h"
#include "paddle/data/distributed_sampler.h"
#include "paddle/data/shard_writer.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/models.h"
#include "paddle/ops/cpu/threading.h"
#include "paddle/optim/lr_schedule.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/local_sgd.h"
#include "paddle/parallel/timeline.h"
#include "paddle/parallel/training_metrics.h"
#include "paddle/parallel/zero_redundancy_optimizer.h"

namespace paddle::examples {
namespace {

constexpr char kUsage[] = R"(usage: fashion_mnist [flags]
  --model=mlp|cnn|resnet     network (default cnn)
  --epochs=N                 training epochs (default 3)
  --batch=N                  batch size (default 128)
  --lr=X                     peak learning rate (default: sgd 0.05, adam 0.001, lars 2.0,
                             lamb 0.004)
  --optimizer=sgd|adam|lars|lamb   (default sgd, with momentum 0.9)
  --momentum=X               sgd/lars momentum (default 0.9)
  --weight-decay=X           (default 0 for sgd/adam, 5e-4 for lars, 0.01 for lamb)
  --warmup-epochs=X          linear warmup before the cosine decay (default 0)
  --checkpoint-dir=DIR       save checkpoints here (default: none)
  --checkpoint-every=N       also save every N steps (default: only at epoch ends)
  --keep-checkpoints=K       keep the newest K (default 3)
  --resume                   continue from the newest good checkpoint in --checkpoint-dir
  --seed=N                   weights, shuffling and dropout (default 1)
  --threads=N                compute threads (default 1)
  --data-dir=DIR             (default /usr/share/datasets/fashion-mnist)
  --train-samples=N          train on the first N samples only (default: all 60000)
  --test-samples=N           evaluate on the first N test samples only (default: all 10000)
  --crash-after-steps=N      testing: die by SIGKILL right after step N
  --device=cpu|cuda|cuda:N   where the model trains (default cpu; cuda = cuda:LOCAL_RANK)
  --amp=none|bf16            bf16 autocast of Linear layers on CUDA (default none)
Data-parallel (started by the launcher: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
  --backend=native|gloo|nccl collective backend (default native; nccl with --device=cuda)
  --bucket-cap-mb=X          gradient bucket size after the first (default 1: unlike DDP's
                             25 MiB, sized for fast networks, 1 MiB lets the CNN's fc1 weight
                             gradient leave while the convolutions' backward still runs;
                             0: the PADDLE_TUNING_PARAMS file's bucket line, else DDP's 25)
  --first-bucket-mb=X        first gradient bucket (default 1; 0 as above, else DDP's 1)
  --compression=none|fp16|bf16   gradient compression on the wire (default none)
  --no-sync                  benchmark: never average gradients (what sync costs)
  --elastic                  an elastic job's worker (paddlerun --nproc=N --min-nproc=M): workers
                             may die, leave (SIGTERM) and join while training goes on; the
                             global --batch stays fixed (examples/fashion_mnist_elastic.h)
  --commit-every=K           --elastic: steps between in-memory commits (default 10)
  --linear-lr-scaling        --elastic: keep the per-rank batch (--batch / the most workers) and
                             scale the LR by world / most workers when the world changes
                             (default: the global batch and the LR stay fixed)
  --data=memory|tasks        the default sampler over the data set in memory, or tasks of
                             record shards handed out by the task master in the job's store,
                             exactly once per epoch, also across --resume (docs/data.md)
  --shards=DIR               --data=tasks: shards from //tools:make_shards (default: the
                             Fashion-MNIST shards in $PADDLE_CACHE_DIR, made on first use)
  --records-per-task=N       --data=tasks: records of one task (default 500)
  --sample-ledger=DIR        --data=tasks: write the sample ids of every committed step here,
                             for tools/ledger-check
  --sample-digest            --data=tasks: each rank prints per epoch to stderr `sample_digest
                             epoch=E rank=R count=C digest=HEX`, a fingerprint of the sample ids
                             it trained on; summed over ranks, a check of exactly-once
  --barrier-only             benchmark: like --no-sync, but the workers meet once a step (a
                             one-element allreduce): what keeping them in step costs alone
  --shard-optimizer          keep 1/N of the optimizer state per worker (ZeRO-1): gradients
                             reduce-scattered, parameters all-gathered (CPU, not with --elastic,
                             --data=tasks, --local-sgd, --no-sync or --barrier-only)
  --local-sgd=H              average parameters every H steps instead of gradients every step
                             (paddle/parallel/local_sgd.h, docs/local-sgd.md; default off)
  --local-sgd-warmup=N       --local-sgd: N synchronous steps first (post-local SGD)
  --outer-momentum=X         --local-sgd: global momentum on the averages (SlowMo; default 0)
  --batch is the global batch, shared by the workers (any number of them: where it does not
  divide --batch, some read one sample more per step and each loss counts by its share).
)";

struct Options {
  std::string model = "cnn";
  int64_t epochs = 3;
  int64_t batch = 128;
  double lr = -1;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  double weight_decay = -1;
  double warmup_epochs = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  bool resume = false;
  int64_t seed = 1;
  int64_t threads = 1;
  std::string data_dir = data::kDefaultFashionMnistDir;
  int64_t train_samples = 0;
  int64_t test_samples = 0;
  int64_t crash_after_steps = -1;
  std::string backend;  // empty: native, or nccl on CUDA
  std::string device = "cpu";
  std::string amp = "none";
  double bucket_cap_mb = 1;
  double first_bucket_mb = 1;
  std::string compression = "none";
  bool no_sync = false;
  bool barrier_only = false;
  bool shard_optimizer = false;
  int64_t local_sgd = 0;  // H; 0: off
  int64_t local_sgd_warmup = 0;
  double outer_momentum = 0;
  bool elastic = false;
  int64_t commit_every = 10;
  bool linear_lr_scaling = false;
  std::string data = "memory";
  std::string shards;
  int64_t records_per_task = 500;
  std::string sample_ledger;
  bool sample_digest = false;
};

absl::Status ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--resume") {
      o->resume = true;
      continue;
    }
    if (arg == "--no-sync") {
      o->no_sync = true;
      continue;
    }
    if (arg == "--elastic") {
      o->elastic = true;
      continue;
    }
    if (arg == "--linear-lr-scaling") {
      o->linear_lr_scaling = true;
      continue;
    }
    if (arg == "--barrier-only") {
      o->barrier_only = true;
      continue;
    }
    if (arg == "--shard-optimizer") {
      o->shard_optimizer = true;
      continue;
    }
    if (arg == "--sample-digest") {
      o->sample_digest = true;
      continue;
    }
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string key = arg.substr(2, eq - 2);
    std::string value = arg.substr(eq + 1);
    auto int_flag = [&](int64_t* out) { return absl::SimpleAtoi(value, out); };
    auto double_flag = [&](double* out) { return absl::SimpleAtod(value, out); };
    bool ok = true;
    if (key == "model") {
      o->model = value;
    } else if (key == "optimizer") {
      o->optimizer = value;
    } else if (key == "checkpoint-dir") {
      o->checkpoint_dir = value;
    } else if (key == "data-dir") {
      o->data_dir = value;
    } else if (key == "device") {
      o->device = value;
    } else if (key == "amp") {
      o->amp = value;
      ok = value == "none" || value == "bf16";
    } else if (key == "backend") {
      o->backend = value;
    } else if (key == "compression") {
      o->compression = value;
    } else if (key == "data") {
      o->data = value;
      ok = value == "memory" || value == "tasks";
    } else if (key == "shards") {
      o->shards = value;
    } else if (key == "sample-ledger") {
      o->sample_ledger = value;
    } else if (key == "records-per-task") {
      ok = int_flag(&o->records_per_task) && o->records_per_task > 0;
    } else if (key == "bucket-cap-mb") {
      ok = double_flag(&o->bucket_cap_mb) && o->bucket_cap_mb >= 0;
    } else if (key == "first-bucket-mb") {
      ok = double_flag(&o->first_bucket_mb) && o->first_bucket_mb >= 0;
    } else if (key == "epochs") {
      ok = int_flag(&o->epochs) && o->epochs >= 0;
    } else if (key == "batch") {
      ok = int_flag(&o->batch) && o->batch > 0;
    } else if (key == "lr") {
      ok = double_flag(&o->lr) && o->lr > 0;
    } else if (key == "momentum") {
      ok = double_flag(&o->momentum) && o->momentum >= 0;
    } else if (key == "weight-decay") {
      ok = double_flag(&o->weight_decay) && o->weight_decay >= 0;
    } else if (key == "warmup-epochs") {
      ok = double_flag(&o->warmup_epochs) && o->warmup_epochs >= 0;
    } else if (key == "checkpoint-every") {
      ok = int_flag(&o->checkpoint_every) && o->checkpoint_every >= 0;
    } else if (key == "keep-checkpoints") {
      ok = int_flag(&o->keep_checkpoints) && o->keep_checkpoints > 0;
    } else if (key == "local-sgd") {
      ok = int_flag(&o->local_sgd) && o->local_sgd > 0;
    } else if (key == "local-sgd-warmup") {
      ok = int_flag(&o->local_sgd_warmup) && o->local_sgd_warmup >= 0;
    } else if (key == "outer-momentum") {
      ok = double_flag(&o->outer_momentum) && o->outer_momentum >= 0 && o->outer_momentum < 1;
    } else if (key == "seed") {
      ok = int_flag(&o->seed) && o->seed >= 0;
    } else if (key == "threads") {
      ok = int_flag(&o->threads) && o->threads > 0;
    } else if (key == "train-samples") {
      ok = int_flag(&o->train_samples) && o->train_samples >= 0;
    } else if (key == "test-samples") {
      ok = int_flag(&o->test_samples) && o->test_samples >= 0;
    } else if (key == "commit-every") {
      ok = int_flag(&o->commit_every) && o->commit_every > 0;
    } else if (key == "crash-after-steps") {
      ok = int_flag(&o->crash_after_steps);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", key, "\n", kUsage));
    }
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat("bad value for --", key, ": '", value, "'"));
  }
  if (o->resume && o->checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint-dir");
  }
  if (o->linear_lr_scaling && !o->elastic) {
    return absl::InvalidArgumentError("--linear-lr-scaling goes with --elastic");
  }
  if (o->data == "tasks" && o->device != "cpu") {
    return absl::InvalidArgumentError("--data=tasks trains on the CPU (--device=cpu)");
  }
  if (o->shard_optimizer && (o->elastic || o->data == "tasks" || o->local_sgd > 0 || o->no_sync ||
                             o->barrier_only || o->device != "cpu")) {
    return absl::InvalidArgumentError(
        "--shard-optimizer trains on the CPU, without --elastic, --data=tasks, --local-sgd, "
        "--no-sync and --barrier-only");
  }
  if (o->data != "tasks" && (!o->shards.empty() || !o->sample_ledger.empty() || o->sample_digest)) {
    return absl::InvalidArgumentError(
        "--shards, --sample-ledger and --sample-digest go with --data=tasks");
  }
  return absl::OkStatus();
}

// The first `n` samples of a split (all when n is 0 or too large).
absl::StatusOr<data::Dataset> Head(data::Dataset d, int64_t n) {
  if (n == 0 || n >= d.size()) return d;
  ASSIGN_OR_RETURN(d.images, d.images.Slice(0, 0, n));
  ASSIGN_OR_RETURN(d.labels, d.labels.Slice(0, 0, n));
  return d;
}

OptimizerFlags RuleFlags(const Options& o) {
  return {o.optimizer, o.lr, o.momentum, o.weight_decay};
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const Options& o,
                                                                std::vector<nn::Variable> params) {
  return MakeRule(RuleFlags(o), std::move(params));
}

// FNV-1a over every parameter and buffer, in name order: equal hashes mean bitwise-equal models.
uint64_t ParamHash(const nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : model.StateDict()) {
    Tensor c = nn::internal::MoveTensor(t, Device::Cpu()).value().Contiguous().value();
    const auto* p = static_cast<const unsigned char*>(c.data());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// This process's peak resident set so far (Linux reports ru_maxrss in KiB).
double PeakRssMb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

absl::StatusOr<double> Evaluate(nn::Module& model, const data::Dataset& test) {
  autograd::NoGradGuard no_grad;
  model.Eval();
  int64_t correct = 0;
  constexpr int64_t kEvalBatch = 1000;
  for (int64_t start = 0; start < test.size(); start += kEvalBatch) {
    int64_t end = std::min(test.size(), start + kEvalBatch);
    ASSIGN_OR_RETURN(Tensor images, test.images.Slice(0, start, end));
    ASSIGN_OR_RETURN(images, images.Contiguous());
    ASSIGN_OR_RETURN(images, nn::internal::MoveTensor(images, model.device()));
    ASSIGN_OR_RETURN(nn::Variable logits, model.Forward(nn::Variable(images)));
    ASSIGN_OR_RETURN(Tensor host_logits, nn::internal::MoveTensor(logits.data(), Device::Cpu()));
    const float* l = host_logits.data<float>();
    int64_t classes = logits.shape()[1];
    for (int64_t i = 0; i < end - start; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k) {
        if (l[i * classes + k] > l[i * classes + best]) best = k;
      }
      correct += best == test.labels.data<int64_t>()[start + i];
    }
  }
  model.Train();
  return test.size() == 0 ? 0.0 : static_cast<double>(correct) / test.size();
}

struct Progress {
  int64_t epoch = 0;       // epoch in progress (0-based)
  int64_t step = 0;        // optimizer steps taken so far, all epochs
  double loss_sum = 0;     // this epoch so far: the sum of this rank's samples' losses
  int64_t loss_count = 0;  // and their count
};

// Writes on the leader only; with a sharded optimizer every rank calls it (SaveState gathers).
absl::Status SaveCheckpoint(checkpoint::CheckpointManager& manager, const nn::Module& model,
                            const RunOptimizer& opt, const nn::Generator& dropout,
                            const data::DataLoader::State& position, const Progress& p,
                            bool write) {
  checkpoint::CheckpointState state;
  RETURN_IF_ERROR(opt.SaveState(&state.tensors, &state.ints));
  if (!write) return absl::OkStatus();
  for (const auto& [name, t] : model.StateDict()) {
    ASSIGN_OR_RETURN(state.tensors["model/" + name], nn::internal::MoveTensor(t, Device::Cpu()));
  }
  state.ints["data/epoch"] = position.epoch;
  state.ints["data/offset"] = position.offset;
  state.ints["train/step"] = p.step;
  state.ints["train/loss_count"] = p.loss_count;
  state.ints["rng/dropout_offset"] = static_cast<int64_t>(dropout.offset());
  state.strings["train/loss_sum"] = absl::StrFormat("%a", p.loss_sum);  // exact
  return manager.Save(p.step, state);
}

// Restores what SaveCheckpoint saved. A checkpoint of another program or model (other keys,
// parameter names or shapes) is an error naming the file and what does not fit.
absl::Status RestoreCheckpoint(const checkpoint::LoadedCheckpoint& loaded, nn::Module& model,
                               RunOptimizer& opt, data::DistributedSampler& sampler,
                               nn::Generator& dropout, Progress* p) {
  const checkpoint::CheckpointState& s = loaded.state;
  auto does_not_fit = [&loaded](const absl::Status& cause) {
    return absl::Status(
        cause.code(),
        absl::StrCat("checkpoint ", loaded.path, " (step ", loaded.step,
                     ") does not fit this run: ", cause.message(),
                     "; was it written by another program, or with another --model or "
                     "--optimizer? Resume with the flags that wrote it, or use another "
                     "--checkpoint-dir"));
  };
  auto get_int = [&](const char* key) -> absl::StatusOr<int64_t> {
    auto it = s.ints.find(key);
    if (it != s.ints.end()) return it->second;
    return does_not_fit(absl::NotFoundError(absl::StrCat("it has no integer '", key, "'")));
  };
  ASSIGN_OR_RETURN(const int64_t epoch, get_int("data/epoch"));
  ASSIGN_OR_RETURN(const int64_t offset, get_int("data/offset"));
  ASSIGN_OR_RETURN(const int64_t step, get_int("train/step"));
  ASSIGN_OR_RETURN(const int64_t loss_count, get_int("train/loss_count"));
  ASSIGN_OR_RETURN(const int64_t dropout_offset, get_int("rng/dropout_offset"));
  auto loss_sum = s.strings.find("train/loss_sum");
  if (loss_sum == s.strings.end() || !absl::SimpleAtod(loss_sum->second, &p->loss_sum)) {
    return does_not_fit(absl::InvalidArgumentError("it has no number 'train/loss_sum'"));
  }
  std::map<std::string, Tensor> model_state;
  for (const auto& [name, t] : s.tensors) {
    if (name.rfind("model/", 0) == 0) model_state[name.substr(6)] = t;
  }
  if (absl::Status st = model.LoadStateDict(model_state); !st.ok()) {
    return does_not_fit(Annotate(st, "model parameters"));
  }
  if (absl::Status st = opt.LoadState(s.tensors, s.ints); !st.ok()) return does_not_fit(st);
  // The offset is rank 0's, which reads the largest share of each step (Note [Uneven shares] in
  // paddle/data/distributed_sampler.h): this rank resumes after as many steps.
  const int64_t rank0_share =
      sampler.global_batch() > 0
          ? (sampler.global_batch() + sampler.world_size() - 1) / sampler.world_size()
          : 1;
  const int64_t my_offset =
      sampler.global_batch() > 0 ? offset / rank0_share * sampler.LocalBatch() : offset;
  if (absl::Status st = sampler.Restore({epoch, my_offset}); !st.ok()) return does_not_fit(st);
  p->epoch = epoch;
  p->step = step;
  p->loss_count = loss_count;
  dropout.set_offset(static_cast<uint64_t>(dropout_offset));
  return absl::OkStatus();
}

// loss x weight, with the weight on `device`.
absl::StatusOr<nn::Variable> ScaleLoss(const nn::Variable& loss, float weight, Device device) {
  ASSIGN_OR_RETURN(Tensor w, Tensor::Empty(loss.shape(), DType::kFloat32));
  w.data<float>()[0] = weight;
  ASSIGN_OR_RETURN(Tensor on_device, nn::internal::MoveTensor(w, device));
  return nn::functional::Mul(loss, nn::Variable(on_device));
}

// The data-parallel group when started by the launcher, mpirun or srun (launched_group.h), else
// none.
using Group = LaunchedGroup;

absl::Status JoinGroup(const Options& o, Group* g) {
  if (!StartedAsGroup()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Device device, ParseDevice(o.device));
  ASSIGN_OR_RETURN(
      Backend backend,
      ParseBackend(!o.backend.empty() ? o.backend : (device.is_cuda() ? "nccl" : "native")));
  return JoinLaunchedGroup(backend, g);
}

// Sum of `values` over the group (in place); nothing to do on one process.
// Through `device` (NCCL takes CUDA tensors only).
absl::Status SumOverGroup(Group& g, std::vector<double>* values, Device device) {
  if (!g.comm) return absl::OkStatus();
  ASSIGN_OR_RETURN(Tensor t,
                   Tensor::FromBlob(values->data(), {static_cast<int64_t>(values->size())},
                                    DType::kFloat64, Device::Cpu()));
  ASSIGN_OR_RETURN(Tensor on_device, nn::internal::MoveTensor(t, device));
  RETURN_IF_ERROR(g.comm->Allreduce(on_device, ReduceOp::kSum)->Wait());
  if (on_device.data() == t.data()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Tensor back, nn::internal::MoveTensor(on_device, Device::Cpu()));
  return t.CopyFrom(back);
}

// --elastic, --data=tasks: the data and what is the program's own go to RunElastic/RunTaskGroup.
int RunElasticJob(const Options& o) {
  ElasticRun run;
  run.model = o.model;
  run.epochs = o.epochs;
  run.batch = o.batch;
  run.seed = o.seed;
  run.warmup_epochs = o.warmup_epochs;
  run.commit_every = o.commit_every;
  run.checkpoint_dir = o.checkpoint_dir;
  run.checkpoint_every = o.checkpoint_every;
  run.keep_checkpoints = o.keep_checkpoints;
  run.resume = o.resume;
  run.linear_lr_scaling = o.linear_lr_scaling;
  run.bucket_cap_mb = o.bucket_cap_mb;
  run.first_bucket_mb = o.first_bucket_mb;
  run.data = o.data;
  run.tasks.shards_dir = o.shards;
  if (o.data == "tasks" && o.shards.empty()) {
    // Every rank asks; one makes them, the others wait for it (Note [Cache folders]).
    absl::StatusOr<std::string> cached = data::FashionMnistShards(o.data_dir, data::Split::kTrain);
    if (!cached.ok()) {
      std::fprintf(stderr, "fashion_mnist: %s\n", cached.status().ToString().c_str());
      return 1;
    }
    run.tasks.shards_dir = *cached;
  }
  run.tasks.records_per_task = o.records_per_task;
  run.tasks.seed = static_cast<uint64_t>(o.seed);
  run.tasks.ledger_dir = o.sample_ledger;
  run.tasks.commit_every = o.commit_every;
  run.tasks.global_batch = o.batch;
  run.tasks.sample_digest = o.sample_digest;
  for (auto [split, n, out] : {std::make_tuple(data::Split::kTrain, o.train_samples, &run.train),
                               std::make_tuple(data::Split::kTest, o.test_samples, &run.test)}) {
    if (split == data::Split::kTrain && o.data == "tasks") continue;  // read from the shards
    absl::StatusOr<data::Dataset> d = data::LoadFashionMnist(split, o.data_dir);
    if (d.ok()) d = Head(*d, n);
    if (!d.ok()) {
      std::fprintf(stderr, "fashion_mnist: %s\n", d.status().ToString().c_str());
      return 1;
    }
    *out = *std::move(d);
  }
  run.make_optimizer = [&o](std::vector<nn::Variable> params) {
    return MakeOptimizer(o, std::move(params));
  };
  run.evaluate = Evaluate;
  run.param_hash = ParamHash;
  return o.elastic ? RunElastic(run) : RunTaskGroup(run);  // --data=tasks in a static group
}

int Run(const Options& o) {
  Group group;
  auto fail = [&group](const absl::Status& s) {
    std::fprintf(stderr, "fashion_mnist: %s\n", s.ToString().c_str());
    FailLaunchedGroup(s, &group);  // the peers quote it; the launcher hears of it now
    return 1;
  };
  ops::cpu::SetNumThreads(static_cast<int>(o.threads));
  if (o.elastic || o.data == "tasks") return RunElasticJob(o);
  if (absl::Status st = JoinGroup(o, &group); !st.ok()) return fail(st);
  const bool leader = group.rank == 0;
  absl::StatusOr<Device> device = ParseDevice(o.device);
  if (!device.ok()) return fail(device.status());
  if (o.device == "cuda") {
    // One GPU per rank, the one the NCCL communicator binds to (LOCAL_RANK).
    int64_t local_rank = 0;
    const char* env = std::getenv("LOCAL_RANK");
    if (env != nullptr && !absl::SimpleAtoi(env, &local_rank)) local_rank = 0;
    *device = Device::Cuda(static_cast<int>(local_rank));
  }
  if (o.amp == "bf16" && !device->is_cuda()) {
    return fail(absl::InvalidArgumentError("--amp=bf16 needs --device=cuda"));
  }
  nn::functional::AutocastBf16Guard autocast(o.amp == "bf16");
  absl::StatusOr<data::Dataset> train = data::LoadFashionMnist(data::Split::kTrain, o.data_dir);
  if (!train.ok()) return fail(train.status());
  absl::StatusOr<data::Dataset> test = data::LoadFashionMnist(data::Split::kTest, o.data_dir);
  if (!test.ok()) return fail(test.status());
  train = Head(*train, o.train_samples);
  test = Head(*test, o.test_samples);
  if (!train.ok() || !test.ok()) return fail(train.ok() ? test.status() : train.status());

  // Weights from the seed (identical replicas); dropout masks from a stream per rank.
  auto dropout = std::make_shared<nn::Generator>(static_cast<uint64_t>(o.seed),
                                                 /*stream=*/1 + static_cast<uint64_t>(group.rank));
  absl::StatusOr<std::shared_ptr<nn::Module>> model =
      nn::MakeModel(o.model, static_cast<uint64_t>(o.seed), dropout);
  if (!model.ok()) return fail(model.status());
  if (absl::Status st = (*model)->To(*device); !st.ok()) return fail(st);
  RunOptimizer opt;
  if (o.shard_optimizer && group.comm) {  // a single process holds all state anyway
    absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> made = ZeroRedundancyOptimizer::Create(
        (*model)->Parameters(), group.comm.get(), RuleFactory(RuleFlags(o)));
    if (!made.ok()) return fail(made.status());
    opt.sharded = *std::move(made);
  } else {
    absl::StatusOr<std::unique_ptr<optim::Optimizer>> made =
        MakeOptimizer(o, (*model)->Parameters());
    if (!made.ok()) return fail(made.status());
    opt.plain = *std::move(made);
  }
  // Any world size: the ranks share each step's --batch samples, unevenly where the world size
  // does not divide it (Note [Uneven shares] in paddle/data/distributed_sampler.h).
  if (o.batch < group.world) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--batch=", o.batch, " (the global batch) is smaller than the ", group.world,
                     " workers: each reads at least one sample per step")));
  }
  absl::StatusOr<data::DistributedSampler> sampler = data::DistributedSampler::Create(
      train->size(), group.rank, group.world, static_cast<uint64_t>(o.seed), /*shuffle=*/true,
      /*drop_last=*/false, /*global_batch=*/o.batch);
  if (!sampler.ok()) return fail(sampler.status());
  const int64_t local_batch = sampler->LocalBatch();

  std::unique_ptr<checkpoint::CheckpointManager> manager;
  Progress p;
  if (!o.checkpoint_dir.empty()) {
    manager = std::make_unique<checkpoint::CheckpointManager>(o.checkpoint_dir,
                                                              static_cast<int>(o.keep_checkpoints));
  }
  if (o.resume) {
    // Data-parallel: every rank resumes from the step rank 0 chose, or every rank fails.
    absl::StatusOr<checkpoint::LoadedCheckpoint> loaded =
        group.comm ? checkpoint::AgreeOnCheckpoint(*group.comm, *manager, *device)
                   : manager->LoadLatest();
    if (!loaded.ok() && !absl::IsNotFound(loaded.status())) return fail(loaded.status());
    if (loaded.ok()) {
      absl::Status st = RestoreCheckpoint(*loaded, **model, opt, *sampler, *dropout, &p);
      if (!st.ok()) return fail(st);
      if (leader)
        std::printf("resumed from %s (step %lld, epoch %lld, sample %lld)\n", loaded->path.c_str(),
                    static_cast<long long>(p.step), static_cast<long long>(p.epoch + 1),
                    static_cast<long long>(sampler->state().offset));
    }
  }

  // Data-parallel: parameters and buffers from rank 0 (after any resume, so all agree), and
  // gradients averaged in buckets during the backward pass; or the sharded optimizer's
  // reduce-scatter, into the gradient buffer it made (Note [Flat homes]), which DDP's buckets
  // would replace.
  std::unique_ptr<DistributedDataParallel> ddp;
  if (group.comm && !opt.sharded) {
    DdpOptions ddp_options;
    ddp_options.bucket_bytes = static_cast<int64_t>(o.bucket_cap_mb * (1 << 20));
    ddp_options.first_bucket_bytes = static_cast<int64_t>(o.first_bucket_mb * (1 << 20));
    ddp_options.compression = o.compression;
    ddp_options.store = group.rendezvous.store;
    absl::StatusOr<std::unique_ptr<DistributedDataParallel>> made =
        DistributedDataParallel::Create(*model, group.comm.get(), ddp_options);
    if (!made.ok()) return fail(made.status());
    ddp = *std::move(made);
    if (o.no_sync || o.barrier_only) ddp->set_sync(false);
  }
  std::unique_ptr<LocalSgd> local_sgd;
  if (ddp && o.local_sgd > 0) {
    LocalSgdOptions lo;
    lo.period = o.local_sgd;
    lo.warmup_steps = o.local_sgd_warmup;
    lo.outer_momentum = o.outer_momentum;
    absl::StatusOr<std::unique_ptr<LocalSgd>> made =
        LocalSgd::Create(*model, group.comm.get(), lo, ddp.get());
    if (!made.ok()) return fail(made.status());
    local_sgd = *std::move(made);
  }
  // PADDLE_TIMELINE=FILE: a Chrome trace of every rank's steps and bucket allreduces.
  std::unique_ptr<Timeline> timeline = Timeline::FromEnv(group.rank);
  if (timeline && ddp) {
    ddp->set_bucket_callback([&timeline](const BucketSpan& b) {
      timeline->Span(absl::StrCat("allreduce bucket ", b.bucket), Timeline::Lane::kAllreduce,
                     b.launched, b.completed, b.bytes);
    });
  }
  // Metrics for paddlerun --dashboard (docs/observability.md): always recorded, sent to the
  // launcher when it sets PADDLE_METRICS_ADDR.
  MetricsRegistry registry;
  TrainingMetrics metrics(&registry);
  absl::StatusOr<std::unique_ptr<MetricsPusher>> pusher =
      MetricsPusher::FromEnv(&registry, group.rank);
  if (!pusher.ok()) return fail(pusher.status());
  auto span = [&timeline](const char* name, absl::Time begin) {
    absl::Time end = absl::Now();
    if (timeline) timeline->Span(name, Timeline::Lane::kCompute, begin, end);
    return end;
  };

  int64_t resume_epoch = p.epoch;
  absl::StatusOr<std::unique_ptr<data::DataLoader>> loader =
      data::DataLoader::Create(*train, *sampler, local_batch);
  if (!loader.ok()) return fail(loader.status());
  int64_t steps_per_epoch = (sampler->NumSamples() + local_batch - 1) / local_batch;
  int64_t total_steps = steps_per_epoch * o.epochs;
  auto warmup_steps = static_cast<int64_t>(std::llround(o.warmup_epochs * steps_per_epoch));
  double peak_lr = opt.lr();
  absl::StatusOr<std::unique_ptr<optim::CosineLr>> cosine =
      optim::CosineLr::Create(peak_lr, std::max<int64_t>(total_steps, 1));
  if (!cosine.ok()) return fail(cosine.status());
  absl::StatusOr<std::unique_ptr<optim::WarmupLr>> schedule =
      optim::WarmupLr::Create(*std::move(cosine), warmup_steps, /*start_factor=*/0.1);
  if (!schedule.ok()) return fail(schedule.status());

  if (leader) {
    std::printf(
        "fashion_mnist: model %s (%lld parameters), optimizer %s, lr %g, batch %lld, "
        "%d workers x %lld threads, %lld train / %lld test samples\n",
        o.model.c_str(), static_cast<long long>((*model)->NumParameters()), o.optimizer.c_str(),
        peak_lr, static_cast<long long>(o.batch), group.world, static_cast<long long>(o.threads),
        static_cast<long long>(train->size()), static_cast<long long>(test->size()));
    if (ddp) std::printf("%s", ddp->reducer().DescribeLayout().c_str());
  }
  // --barrier-only: the step's meeting point, on the device (NCCL takes CUDA tensors only).
  Tensor step_barrier;
  if (o.barrier_only && group.comm) {
    absl::StatusOr<Tensor> zeros = Tensor::Zeros({1}, DType::kFloat32);
    if (!zeros.ok()) return fail(zeros.status());
    absl::StatusOr<Tensor> on_device = nn::internal::MoveTensor(*zeros, *device);
    if (!on_device.ok()) return fail(on_device.status());
    step_barrier = *std::move(on_device);
  }
  ProgressLine progress(leader);
  std::string last_json;
  for (int64_t epoch = resume_epoch; epoch < o.epochs; ++epoch) {
    (*loader)->StartEpoch(epoch);
    if (epoch != resume_epoch) p.loss_sum = 0, p.loss_count = 0;
    p.epoch = epoch;
    int64_t samples = 0;
    absl::Duration wait_before = ddp ? ddp->reducer().stats().comm_wait_time : absl::ZeroDuration();
    absl::Time start = absl::Now();
    while (true) {
      absl::Time t0 = absl::Now();
      absl::StatusOr<std::optional<data::Batch>> batch = (*loader)->Next();
      if (!batch.ok()) return fail(batch.status());
      if (!batch->has_value()) break;
      opt.set_lr((*schedule)->LrAt(p.step));
      opt.ZeroGrad();
      absl::Time t1 = span("data", t0);
      metrics.RecordDataWait(t1 - t0);
      absl::StatusOr<Tensor> batch_images = nn::internal::MoveTensor((*batch)->images, *device);
      if (!batch_images.ok()) return fail(batch_images.status());
      absl::StatusOr<Tensor> batch_labels = nn::internal::MoveTensor((*batch)->labels, *device);
      if (!batch_labels.ok()) return fail(batch_labels.status());
      nn::Variable images(*batch_images);
      absl::StatusOr<nn::Variable> logits = ddp ? ddp->Forward(images) : (*model)->Forward(images);
      if (!logits.ok()) return fail(logits.status());
      absl::StatusOr<nn::Variable> loss =
          nn::functional::SoftmaxCrossEntropy(*logits, *batch_labels);
      if (!loss.ok()) return fail(loss.status());
      // This rank's mean loss, weighted by its share of --batch (Note [Uneven shares]): 1 in a
      // full step of an even split, less in the epoch's short last step.
      const int64_t rows = (*batch)->images.shape()[0];
      absl::StatusOr<nn::Variable> weighted = *loss;
      if (const double w = ShortStepWeight(rows, group.world, o.batch); w != 1.0) {
        weighted = ScaleLoss(*loss, static_cast<float>(w), *device);
        if (!weighted.ok()) return fail(weighted.status());
      }
      absl::Time t2 = span("forward", t1);
      absl::Status st = ddp ? ddp->Backward(*weighted) : weighted->Backward();
      if (st.ok() && step_barrier.defined()) {
        st = group.comm->Allreduce(step_barrier, ReduceOp::kSum)->Wait();
      }
      absl::Time t3 = span("backward", t2);
      if (st.ok()) st = opt.Step();
      if (st.ok() && local_sgd) st = local_sgd->AfterStep().status();
      if (!st.ok()) return fail(st);
      span("optimizer", t3);
      absl::StatusOr<Tensor> host_loss = nn::internal::MoveTensor(loss->data(), Device::Cpu());
      if (!host_loss.ok()) return fail(host_loss.status());
      p.loss_sum += static_cast<double>(*host_loss->data<float>()) * static_cast<double>(rows);
      p.loss_count += rows;  // the epoch's loss is the mean over its samples, at any world size
      ++p.step;
      metrics.RecordStep(absl::Now() - t0, rows, ddp ? &ddp->reducer().stats() : nullptr);
      metrics.SetLoss(*host_loss->data<float>());
      // The step's global batch: --batch, or what is left of the epoch in its last step.
      samples += std::min(o.batch, sampler->TotalSize() - (*batch)->index * o.batch);
      progress.Update((*loader)->state().offset / local_batch, steps_per_epoch, samples, start);
      bool end_of_epoch = (*loader)->state().offset >= sampler->NumSamples();
      if (manager && (leader || opt.sharded) && o.checkpoint_every > 0 &&
          p.step % o.checkpoint_every == 0 && !end_of_epoch) {
        st = SaveCheckpoint(*manager, **model, opt, *dropout, (*loader)->state(), p, leader);
        if (!st.ok()) return fail(st);
      }
      if (p.step == o.crash_after_steps) {
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
    }
    double wait =
        ddp ? absl::ToDoubleSeconds(ddp->reducer().stats().comm_wait_time - wait_before) : 0.0;
    // Every rank's loss counts; the replicas are identical, so rank 0 alone evaluates.
    std::vector<double> loss_totals = {p.loss_sum, static_cast<double>(p.loss_count)};
    if (absl::Status st = SumOverGroup(group, &loss_totals, *device); !st.ok()) return fail(st);
    // The epoch ends when the last worker has finished its steps, which the sum above waits for:
    // samples/s counts every worker's samples, so it must be over the slowest worker's time too
    // (with --no-sync, or a straggler, rank 0 alone may finish well before the others).
    double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    progress.Finish();
    double wait_fraction = seconds > 0 ? wait / seconds : 0;
    double train_loss = loss_totals[1] > 0 ? loss_totals[0] / loss_totals[1] : 0;
    double rate = seconds > 0 ? samples / seconds : 0;
    if (manager && (leader || opt.sharded)) {
      // The position is the start of the next epoch.
      p.epoch = epoch + 1;
      Progress next = p;
      next.loss_sum = 0;
      next.loss_count = 0;
      absl::Status st =
          SaveCheckpoint(*manager, **model, opt, *dropout, {epoch + 1, 0}, next, leader);
      if (!st.ok()) return fail(st);
    }
    if (!leader) continue;
    absl::StatusOr<double> accuracy = Evaluate(**model, *test);
    if (!accuracy.ok()) return fail(accuracy.status());
    metrics.SetAccuracy(*accuracy);
    std::printf(
        "epoch %lld/%lld  train_loss %.4f  test_accuracy %.4f  samples/s %.0f  "
        "epoch_time %.2fs%s\n",
        static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), train_loss, *accuracy,
        rate, seconds,
        ddp ? absl::StrFormat("  comm_wait %.1f%%", 100 * wait_fraction).c_str() : "");
    std::fflush(stdout);
    last_json = absl::StrFormat(
        "{\"epoch\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, \"samples_per_s\": "
        "%.1f, \"epoch_time_s\": %.3f, \"world_size\": %d, \"comm_wait_fraction\": %.4f, "
        "\"device\": \"%s\", \"amp\": \"%s\", \"optimizer_state_bytes\": %d, "
        "\"peak_rss_mb\": %.1f, \"param_hash\": \"%016x\"}",
        epoch + 1, train_loss, *accuracy, rate, seconds, group.world, wait_fraction,
        device->ToString(), o.amp, opt.StateBytes(), PeakRssMb(), ParamHash(**model));
  }
  if (timeline) {
    if (absl::Status st = timeline->Write(group.comm.get()); !st.ok()) return fail(st);
    if (leader) std::printf("timeline: %s\n", timeline->path().c_str());
  }
  if (local_sgd) {  // one model again on every rank (per-epoch figures are rank 0's replica)
    if (absl::Status st = local_sgd->Synchronize(); !st.ok()) return fail(st);
  }
  if (!device->is_cuda()) {  // metrics reduce CPU tensors, which an NCCL group cannot
    absl::StatusOr<std::string> global = EvaluateOverRanks(**model, *test, group.comm.get());
    if (!global.ok()) return fail(global.status());
    if (leader) std::printf("%s\n", global->c_str());
  }
  // The verdict on the job's collectives, its last one's included (Note [Ring stamp]): a rank
  // may have completed that one before learning that another rank called something else.
  if (group.comm) {
    if (absl::Status st = group.comm->Shutdown(); !st.ok()) return fail(st);
  }
  if (!leader) return 0;
  if (last_json.empty()) {
    last_json =
        absl::StrFormat("{\"epoch\": %d, \"param_hash\": \"%016x\"}", o.epochs, ParamHash(**model));
  }
  std::printf("%s\n", last_json.c_str());
  return 0;
}

}  // namespace
}  // namespace paddle::examples

int main(int argc, char** argv) {
  paddle::examples::Options options;
  absl::Status s = paddle::examples::ParseOptions(argc, argv, &options);
  if (!s.ok()) {
    std::fprintf(stderr, "fashion_mnist: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return paddle::examples::Run(options);
}
