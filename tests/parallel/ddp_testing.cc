// Groups, batches, models and training loops for the reducer tests.
#include "tests/parallel/ddp_testing.h"

#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/sgd.h"

namespace paddle::ddptest {
namespace {

void RunRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const std::string& name,
                                                                const nn::Module& model) {
  if (name == "lars") {
    optim::LarsOptions options;
    options.lr = 0.5;
    ASSIGN_OR_RETURN(auto lars, optim::Lars::Create(model.Parameters(), options));
    return std::unique_ptr<optim::Optimizer>(std::move(lars));
  }
  optim::SgdOptions options;
  options.lr = 0.1;
  options.momentum = 0.9;
  ASSIGN_OR_RETURN(auto sgd, optim::Sgd::Create(model.Parameters(), options));
  return std::unique_ptr<optim::Optimizer>(std::move(sgd));
}

absl::StatusOr<std::map<std::string, Tensor>> Snapshot(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, var] : model.NamedParameters()) {
    ASSIGN_OR_RETURN(out[name], var.data().Clone());
  }
  return out;
}

absl::StatusOr<autograd::Variable> Loss(nn::Module& model, const Batch& batch,
                                        DistributedDataParallel* ddp) {
  autograd::Variable x(batch.x);
  ASSIGN_OR_RETURN(autograd::Variable logits, ddp ? ddp->Forward(x) : model.Forward(x));
  return nn::functional::SoftmaxCrossEntropy(logits, batch.labels);
}

// The loop shared by the reference (ddp null, world 1) and every rank.
absl::StatusOr<std::map<std::string, Tensor>> Train(const TrainConfig& config, nn::Module& model,
                                                    DistributedDataParallel* ddp, int rank,
                                                    int world) {
  ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> optimizer,
                   MakeOptimizer(config.optimizer, model));
  const int64_t local = config.batch / world;
  const int64_t micro = local / config.micro_batches;
  for (int step = 0; step < config.steps; ++step) {
    for (int m = 0; m < config.micro_batches; ++m) {
      const int64_t begin = rank * local + m * micro;
      Batch batch = MakeBatch(config.data_seed, step, config.batch, begin, begin + micro);
      ASSIGN_OR_RETURN(autograd::Variable loss, Loss(model, batch, ddp));
      if (ddp != nullptr) {
        ddp->set_sync(m + 1 == config.micro_batches);
        RETURN_IF_ERROR(ddp->Backward(loss));
      } else {
        RETURN_IF_ERROR(loss.Backward());
      }
    }
    RETURN_IF_ERROR(optimizer->Step());
    optimizer->ZeroGrad();
  }
  return Snapshot(model);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> Group::Create(int n, Backend backend,
                                                     absl::Duration timeout) {
  static std::atomic<int> groups{0};
  auto store = std::make_shared<HashStore>();
  const std::string prefix = absl::StrCat("ddp", groups++);
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> results(n);
  RunRanks(n, [&](int rank) {
    CommunicatorOptions options;
    options.backend = backend;
    options.store = store;
    options.store_prefix = prefix;
    options.rank = rank;
    options.world_size = n;
    options.timeout = timeout;
    options.connect_timeout = absl::Seconds(120);
    results[rank] = Communicator::Create(options);
  });
  std::unique_ptr<Group> group(new Group());
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    group->comms_.push_back(std::move(*r));
  }
  return group;
}

Group::~Group() {
  RunRanks(size(), [&](int rank) { comms_[rank].reset(); });
}

std::vector<absl::Status> Group::Run(const std::function<absl::Status(int, Communicator&)>& body) {
  std::vector<absl::Status> statuses(size());
  RunRanks(size(), [&](int rank) { statuses[rank] = body(rank, *comms_[rank]); });
  return statuses;
}

std::string Failures(const std::vector<absl::Status>& statuses) {
  std::string out;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) absl::StrAppend(&out, "rank ", r, ": ", statuses[r].ToString(), "\n");
  }
  return out;
}

Batch MakeBatch(uint64_t seed, int step, int64_t batch, int64_t begin, int64_t end) {
  constexpr int64_t kPixels = 28 * 28;
  const int64_t rows = end - begin;
  Batch out;
  out.x = *Tensor::Empty({rows, 1, 28, 28}, DType::kFloat32);
  out.labels = *Tensor::Empty({rows}, DType::kInt64);
  for (int64_t i = 0; i < rows; ++i) {
    // One stream per (step, row), so any slice of the global batch is the same data.
    Philox rng(seed, static_cast<uint64_t>(step) * batch + begin + i);
    float* x = out.x.data<float>() + i * kPixels;
    for (int64_t k = 0; k < kPixels; ++k) x[k] = rng.NextNormal();
    out.labels.data<int64_t>()[i] = rng.NextU32() % 10;
  }
  return out;
}

SkipModel::SkipModel(int64_t hidden, bool use_skip) : Module("skip_model"), use_skip(use_skip) {
  nn::Generator init(11);
  fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(784, hidden, &init));
  skip_ = RegisterModule("skip", std::make_shared<nn::Linear>(hidden, hidden, &init));
  out_ = RegisterModule("out", std::make_shared<nn::Linear>(hidden, 10, &init));
}

absl::StatusOr<autograd::Variable> SkipModel::Forward(const autograd::Variable& x) {
  ASSIGN_OR_RETURN(autograd::Variable h, nn::functional::Flatten(x));
  ASSIGN_OR_RETURN(h, fc1_->Forward(h));
  ASSIGN_OR_RETURN(h, nn::functional::Relu(h));
  if (use_skip) {
    ASSIGN_OR_RETURN(h, skip_->Forward(h));
  }
  return out_->Forward(h);
}

absl::StatusOr<std::map<std::string, Tensor>> TrainReference(const TrainConfig& config) {
  std::shared_ptr<nn::Module> model = config.make_model(-1);
  return Train(config, *model, nullptr, 0, 1);
}

absl::StatusOr<std::map<std::string, Tensor>> TrainRank(
    const TrainConfig& config, const DdpOptions& options, int rank, Communicator& comm,
    std::unique_ptr<DistributedDataParallel>* ddp_out) {
  std::shared_ptr<nn::Module> model = config.make_model(rank);
  ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                   DistributedDataParallel::Create(model, &comm, options));
  absl::StatusOr<std::map<std::string, Tensor>> result =
      Train(config, *model, ddp.get(), rank, comm.world_size());
  if (ddp_out != nullptr) *ddp_out = std::move(ddp);
  return result;
}

absl::Status CompareParams(const std::map<std::string, Tensor>& got,
                           const std::map<std::string, Tensor>& want, double rtol, double atol,
                           double* max_abs) {
  if (got.size() != want.size()) {
    return absl::InternalError(absl::StrCat(got.size(), " parameters, want ", want.size()));
  }
  double worst = 0;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return absl::InternalError(absl::StrCat("missing ", name));
    const float* g = it->second.data<float>();
    const float* v = w.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double diff = std::fabs(static_cast<double>(g[i]) - v[i]);
      worst = std::max(worst, diff);
      if (diff > rtol * std::fabs(v[i]) + atol) {
        return absl::InternalError(absl::StrCat(name, "[", i, "] = ", g[i], ", want ", v[i],
                                                " (rtol ", rtol, ", atol ", atol, ")"));
      }
    }
  }
  if (max_abs != nullptr) *max_abs = worst;
  return absl::OkStatus();
}

}  // namespace paddle::ddptest
