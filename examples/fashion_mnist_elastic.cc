// fashion_mnist --elastic: one worker of an elastic job (see fashion_mnist_elastic.h).
//
// The worker joins the job's generations (paddle/parallel/elastic.h) through the store the
// launcher hosts at MASTER_ADDR:MASTER_PORT. Each step takes this rank's share of the next global
// batch (paddle/parallel/global_batch.h) and scales its loss by its share, so the averaged
// gradient is the mean over the global batch whatever the world size. Every --commit-every steps
// (and before a planned change) the state is committed in memory (Note [Elastic commit]). When a
// collective fails, the worker leaves the generation, joins the next one, adopts rank 0's commit
// and goes on; when a worker waits to join, or one got SIGTERM, every rank commits and they
// regroup without a rollback, and the one that got SIGTERM exits 0.
//
// Output: rank 0 of each generation prints "elastic: ..." lines when the membership changes
// (with a wall-clock stamp t=..., for measuring recovery from outside), progress lines with the
// world size, one line per epoch, and at the end a JSON line that adds membership_changes,
// recovery_s_max (seconds from a failure seen to the next completed step, over this worker's
// failures), commit_fraction (time in commits over the training time) and world_size.
#include "examples/fashion_mnist_elastic.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/core/metrics_pusher.h"
#include "paddle/core/metrics_registry.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/models.h"
#include "paddle/optim/lr_schedule.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/elastic.h"
#include "paddle/parallel/elastic_state.h"
#include "paddle/parallel/global_batch.h"
#include "paddle/parallel/training_metrics.h"

namespace paddle::examples {
namespace {

std::atomic<bool> g_leave{false};  // SIGTERM: leave after this step
void OnTerm(int) { g_leave.store(true); }

absl::StatusOr<int64_t> EnvInt(const char* name, std::optional<int64_t> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic: environment variable ", name,
                     " is not set; start the workers with paddlerun --nproc=N --min-nproc=M"));
  }
  int64_t out;
  if (!absl::SimpleAtoi(v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic: environment variable ", name, " is '", v, "', not an integer"));
  }
  return out;
}

// This rank's samples of the step: rows order[from, from + count) of the data set.
absl::Status Gather(const data::Dataset& d, const std::vector<int64_t>& order, int64_t from,
                    int64_t count, Tensor* images, Tensor* labels) {
  const int64_t row = d.images.numel() / d.size();
  ASSIGN_OR_RETURN(*images, Tensor::Empty({count, 1, 28, 28}, DType::kFloat32));
  ASSIGN_OR_RETURN(*labels, Tensor::Empty({count}, DType::kInt64));
  const float* src = d.images.data<float>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t s = order[from + i];
    std::memcpy(images->data<float>() + i * row, src + s * row, row * sizeof(float));
    labels->data<int64_t>()[i] = d.labels.data<int64_t>()[s];
  }
  return absl::OkStatus();
}

class Trainer {
 public:
  explicit Trainer(const ElasticRun& run) : run_(run) {}
  int Run();

 private:
  absl::Status Setup();
  // One generation: until the job ends (OkStatus with done_ set), a planned change (OkStatus),
  // or a failure (the error, after which the state is rolled back).
  absl::Status Generation(const Membership& m);
  absl::Status Step(int64_t* global_size, double* loss);
  // --data=tasks: this rank's samples from the task master; *global_size 0 when no rank had any.
  absl::Status TaskStep(int64_t* global_size, double* loss);
  // ElasticState::Commit, with the task positions around it (Note [Task positions]).
  absl::Status CommitState(Communicator& comm);
  // --data=tasks, a step found no sample anywhere: commit, meet, and let rank 0 end the epoch
  // (Note [Task positions], step 5). Sets *ended when the epoch is over.
  absl::Status EpochTail(Communicator& comm, bool leader, bool* ended);
  int64_t TrainSize() const { return data_ ? data_->num_samples() : run_.train.size(); }
  // --resume: the newest good checkpoint becomes this worker's commit, unless the job runs.
  absl::Status Resume();
  // Rank 0, after a commit: saves it when --checkpoint-every (or the epoch's end) says so.
  void MaybeSave(const Membership& m, bool epoch_end);
  // The global batch at world size `world` (--linear-lr-scaling: per-rank batch fixed).
  int64_t GlobalBatch(int world) const {
    return run_.linear_lr_scaling ? run_.batch / max_size_ * world : run_.batch;
  }

  const ElasticRun& run_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<ElasticGroup> group_;
  std::shared_ptr<nn::Generator> dropout_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<ElasticState> state_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<TaskData> data_;  // --data=tasks
  // --checkpoint-dir
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints_;
  int64_t last_saved_step_ = -1;
  int64_t max_size_ = 1;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
  int64_t steps_per_epoch_ = 0;
  int expected_ = 0;
  bool done_ = false;
  bool leaving_ = false;
  absl::Time failed_at_ = absl::InfinitePast();
  double recovery_s_max_ = 0;
  int64_t rolled_back_max_ = 0;  // most steps one rollback undid (at most --commit-every)
  absl::Duration commit_time_, train_time_;
  int64_t local_samples_ = 0;  // this rank's samples in the last step
  absl::Time epoch_start_ = absl::Now(), last_progress_ = absl::Now();
  std::string last_json_;
  // paddlerun --dashboard (docs/observability.md); the pusher goes before the registry.
  MetricsRegistry registry_;
  TrainingMetrics metrics_{&registry_};
  std::unique_ptr<MetricsPusher> pusher_;
  std::string change_cause_ = "the job started";  // why the next generation forms
};

absl::Status Trainer::Setup() {
  ElasticOptions o;
  ASSIGN_OR_RETURN(int64_t min_size, EnvInt("PADDLE_ELASTIC_MIN_SIZE", 1));
  ASSIGN_OR_RETURN(int64_t max_size, EnvInt("PADDLE_ELASTIC_MAX_SIZE", std::nullopt));
  ASSIGN_OR_RETURN(int64_t port, EnvInt("MASTER_PORT", std::nullopt));
  ASSIGN_OR_RETURN(int64_t rank, EnvInt("RANK", 0));
  ASSIGN_OR_RETURN(int64_t restarts, EnvInt("PADDLE_RESTART_COUNT", 0));
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr) {
    return absl::InvalidArgumentError("--elastic: MASTER_ADDR is not set (the job's store)");
  }
  if (run_.batch < max_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--batch=%d (the global batch) is smaller than the %d workers the job may have", run_.batch,
        max_size));
  }
  TcpStoreOptions so;
  so.host = addr;
  so.port = static_cast<int>(port);
  ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Connect(so));
  store_ = std::move(store);
  o.store = store_;
  o.min_size = static_cast<int>(min_size);
  o.max_size = static_cast<int>(max_size);
  max_size_ = max_size;
  ASSIGN_OR_RETURN(group_, ElasticGroup::Create(o));
  // The first workers expect each other; a restarted one expects nobody in particular.
  expected_ = restarts == 0 ? static_cast<int>(max_size) : 0;

  dropout_ = std::make_shared<nn::Generator>(static_cast<uint64_t>(run_.seed),
                                             1 + static_cast<uint64_t>(rank));
  ASSIGN_OR_RETURN(model_, nn::MakeModel(run_.model, static_cast<uint64_t>(run_.seed), dropout_));
  ASSIGN_OR_RETURN(opt_, run_.make_optimizer(model_->Parameters()));
  state_ = std::make_unique<ElasticState>(model_.get(), opt_.get());
  state_->extras()["rng/dropout_offset"] = 0;  // every rank has the same keys
  if (run_.data == "tasks") {
    ASSIGN_OR_RETURN(data_, TaskData::Create(store_.get(), run_.tasks));
    data_->InitExtras(state_->extras());
  }
  if (!run_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<checkpoint::CheckpointManager>(
        run_.checkpoint_dir, static_cast<int>(run_.keep_checkpoints));
  }
  if (run_.resume) RETURN_IF_ERROR(Resume());
  steps_per_epoch_ = StepsPerEpoch(TrainSize(), run_.batch);
  const int64_t total = std::max<int64_t>(steps_per_epoch_ * run_.epochs, 1);
  ASSIGN_OR_RETURN(std::unique_ptr<optim::CosineLr> cosine,
                   optim::CosineLr::Create(opt_->lr(), total));
  ASSIGN_OR_RETURN(schedule_,
                   optim::WarmupLr::Create(std::move(cosine),
                                           std::llround(run_.warmup_epochs * steps_per_epoch_),
                                           /*start_factor=*/0.1));
  std::signal(SIGTERM, OnTerm);
  return absl::OkStatus();
}

absl::Status Trainer::Resume() {
  // A worker that joins a running job (restarted, or on a node started again) must take the
  // members' state: a commit from disk would make it a stateful member that may close a
  // generation on its own (Note [Elastic rendezvous]).
  ASSIGN_OR_RETURN(bool running, group_->JobStarted());
  if (running) return absl::OkStatus();
  absl::StatusOr<checkpoint::LoadedCheckpoint> loaded = checkpoints_->LoadLatest();
  if (absl::IsNotFound(loaded.status())) {
    std::printf("elastic: no checkpoint to resume in %s; starting from the beginning\n",
                run_.checkpoint_dir.c_str());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(loaded.status());
  auto world = loaded->state.ints.find("elastic/world_size");
  RETURN_IF_ERROR(Annotate(state_->FromCheckpoint(loaded->state), loaded->path));
  const TrainProgress& p = state_->progress();
  // The newest commit ranks first in the first generation, whose rank 0 broadcasts it: every
  // worker resumes from the same step, whether or not it can read this directory.
  std::printf(
      "elastic: resumed from %s: step %lld, epoch %lld, sample %lld of the epoch (written at "
      "world size %lld)\n",
      loaded->path.c_str(), static_cast<long long>(p.step), static_cast<long long>(p.epoch + 1),
      static_cast<long long>(p.samples),
      static_cast<long long>(world == loaded->state.ints.end() ? -1 : world->second));
  std::fflush(stdout);
  last_saved_step_ = p.step;
  return absl::OkStatus();
}

void Trainer::MaybeSave(const Membership& m, bool epoch_end) {
  if (!checkpoints_) return;
  const int64_t step = state_->committed().step;
  const int64_t every = run_.checkpoint_every;
  if (!epoch_end && (every <= 0 || step / every == last_saved_step_ / every)) return;
  absl::StatusOr<checkpoint::CheckpointState> ckpt = state_->ToCheckpoint();
  absl::Status st = ckpt.status();
  if (st.ok()) {
    ckpt->ints["elastic/world_size"] = m.size;
    st = checkpoints_->Save(step, *ckpt);
  }
  if (!st.ok()) {  // the in-memory commit still protects the job; say so and go on
    std::fprintf(stderr, "elastic: checkpoint of step %lld not saved: %s\n",
                 static_cast<long long>(step), st.ToString().c_str());
    return;
  }
  last_saved_step_ = step;
}

absl::Status Trainer::Step(int64_t* global_size, double* loss_out) {
  TrainProgress& p = state_->progress();
  if (order_epoch_ != p.epoch) {
    ASSIGN_OR_RETURN(order_,
                     EpochOrder(run_.train.size(), static_cast<uint64_t>(run_.seed), p.epoch));
    order_epoch_ = p.epoch;
  }
  Communicator& comm = *group_->comm();
  ASSIGN_OR_RETURN(BatchShare share,
                   ShareOfGlobalBatch(run_.train.size(), p.samples, GlobalBatch(comm.world_size()),
                                      comm.rank(), comm.world_size()));
  Tensor images, labels;
  RETURN_IF_ERROR(
      Gather(run_.train, order_, p.samples + share.begin, share.count, &images, &labels));
  if (run_.linear_lr_scaling) {
    // The schedule follows the samples seen (steps differ with the world size), its LR scaled
    // by the linear rule: world / most workers.
    const int64_t at = (p.epoch * run_.train.size() + p.samples) / run_.batch;
    opt_->set_lr(schedule_->LrAt(at) * static_cast<double>(comm.world_size()) /
                 static_cast<double>(max_size_));
  } else {
    opt_->set_lr(schedule_->LrAt(p.step));
  }
  opt_->ZeroGrad();
  ASSIGN_OR_RETURN(nn::Variable logits, ddp_->Forward(nn::Variable(images)));
  ASSIGN_OR_RETURN(nn::Variable loss, nn::functional::SoftmaxCrossEntropy(logits, labels));
  // DDP averages over ranks; weighting by the share makes that the global batch's mean.
  ASSIGN_OR_RETURN(Tensor weight, Tensor::Empty(loss.shape(), DType::kFloat32));
  weight.data<float>()[0] =
      static_cast<float>(share.count * comm.world_size()) / static_cast<float>(share.global_size);
  ASSIGN_OR_RETURN(nn::Variable weighted, nn::functional::Mul(loss, nn::Variable(weight)));
  RETURN_IF_ERROR(ddp_->Backward(weighted));
  RETURN_IF_ERROR(opt_->Step());
  *global_size = share.global_size;
  local_samples_ = share.count;
  // This rank's part of the global mean loss (AgreeOnChange sums the parts).
  *loss_out = loss.data().data<float>()[0] * static_cast<double>(share.count) /
              static_cast<double>(share.global_size);
  return absl::OkStatus();
}

absl::Status Trainer::TaskStep(int64_t* global_size, double* loss_out) {
  TrainProgress& p = state_->progress();
  Communicator& comm = *group_->comm();
  // Note [Step count] in fashion_mnist_tasks.cc
  ASSIGN_OR_RETURN(TaskData::StepSamples s, data_->TakeStep(comm, p.epoch, p.step + 1, run_.batch));
  const int64_t got = s.got;
  local_samples_ = got;
  Tensor& images = s.images;
  Tensor& labels = s.labels;
  *global_size = s.global;
  *loss_out = 0;
  if (*global_size == 0) return absl::OkStatus();
  opt_->set_lr(schedule_->LrAt(p.step));
  opt_->ZeroGrad();
  ASSIGN_OR_RETURN(nn::Variable logits, ddp_->Forward(nn::Variable(images)));
  ASSIGN_OR_RETURN(nn::Variable loss, nn::functional::SoftmaxCrossEntropy(logits, labels));
  // DDP averages over ranks, so weight by this rank's share of the global batch (--batch), not
  // of the step's samples: a short step at the epoch's tail then moves the model by what its
  // samples are worth (Note [Short steps] in fashion_mnist_tasks.cc; 0 for the dummy sample of a
  // rank that had none).
  ASSIGN_OR_RETURN(Tensor weight, Tensor::Empty(loss.shape(), DType::kFloat32));
  weight.data<float>()[0] = static_cast<float>(ShortStepWeight(got, comm.world_size(), run_.batch));
  ASSIGN_OR_RETURN(nn::Variable weighted, nn::functional::Mul(loss, nn::Variable(weight)));
  RETURN_IF_ERROR(ddp_->Backward(weighted));
  RETURN_IF_ERROR(opt_->Step());
  if (got > 0) {  // this rank's part of the global mean (AgreeOnChange sums the parts)
    *loss_out =
        loss.data().data<float>()[0] * static_cast<double>(got) / static_cast<double>(*global_size);
  }
  return absl::OkStatus();
}

absl::Status Trainer::CommitState(Communicator& comm) {
  if (data_) RETURN_IF_ERROR(data_->Exchange(comm, state_->extras()));
  RETURN_IF_ERROR(state_->Commit());
  if (data_) RETURN_IF_ERROR(data_->AfterCommit());
  return absl::OkStatus();
}

absl::Status Trainer::EpochTail(Communicator& comm, bool leader, bool* ended) {
  absl::Time c0 = absl::Now();
  RETURN_IF_ERROR(CommitState(comm));
  commit_time_ += absl::Now() - c0;
  RETURN_IF_ERROR(comm.Barrier()->Wait());  // every rank has finished its used-up tasks
  ASSIGN_OR_RETURN(Tensor verdict, Tensor::Zeros({1}, DType::kInt64));
  if (leader) {
    ASSIGN_OR_RETURN(bool over, data_->EndEpoch(state_->progress().epoch));
    verdict.data<int64_t>()[0] = over ? 1 : 0;
  }
  RETURN_IF_ERROR(comm.Broadcast(verdict, 0)->Wait());
  *ended = verdict.data<int64_t>()[0] == 1;
  if (*ended) data_->EpochEnded();
  return absl::OkStatus();
}

absl::Status Trainer::Generation(const Membership& m) {
  Communicator& comm = *group_->comm();
  const bool leader = m.rank == 0;
  metrics_.SetMembership(m.generation, m.rank, m.size, change_cause_);
  if (pusher_) pusher_->set_rank(m.rank);
  RETURN_IF_ERROR(state_->Broadcast(comm, 0));
  dropout_->set_offset(static_cast<uint64_t>(state_->extras()["rng/dropout_offset"]));
  if (data_) {
    RETURN_IF_ERROR(data_->StartGeneration(state_->extras(), state_->progress().epoch, m.generation,
                                           m.rank, m.size));
    RETURN_IF_ERROR(comm.Barrier()->Wait());  // every adoption is in before anyone asks
  }
  DdpOptions ddp_options;
  ddp_options.bucket_bytes = static_cast<int64_t>(run_.bucket_cap_mb * (1 << 20));
  ddp_options.first_bucket_bytes = static_cast<int64_t>(run_.first_bucket_mb * (1 << 20));
  ASSIGN_OR_RETURN(ddp_, DistributedDataParallel::Create(model_, &comm, ddp_options));
  if (leader) {
    std::printf(
        "elastic: generation %lld: world size %d, from step %lld (epoch %lld, sample "
        "%lld), rank 0 is pid %d\n",
        static_cast<long long>(m.generation), m.size,
        static_cast<long long>(state_->progress().step),
        static_cast<long long>(state_->progress().epoch + 1),
        static_cast<long long>(state_->progress().samples), static_cast<int>(getpid()));
    std::fflush(stdout);
  }
  while (true) {
    TrainProgress& p = state_->progress();
    if (p.epoch >= run_.epochs) {
      done_ = true;
      if (leader) RETURN_IF_ERROR(group_->MarkDone());
      return absl::OkStatus();
    }
    absl::Time t0 = absl::Now();
    int64_t global_size = 0;
    double loss = 0;
    bool epoch_end = false;
    MembershipChange change;
    if (data_) {
      RETURN_IF_ERROR(TaskStep(&global_size, &loss));
      if (global_size == 0) {
        RETURN_IF_ERROR(EpochTail(comm, leader, &epoch_end));
        if (!epoch_end) continue;
      }
    } else {
      RETURN_IF_ERROR(Step(&global_size, &loss));
    }
    if (global_size > 0) {
      ASSIGN_OR_RETURN(change, group_->AgreeOnChange(g_leave.load(), &loss));
      ++p.step;
      metrics_.RecordStep(absl::Now() - t0, local_samples_, &ddp_->reducer().stats());
      metrics_.SetLoss(loss);
      p.samples += global_size;
      p.loss_sum += loss;
      ++p.loss_count;
    }
    state_->extras()["rng/dropout_offset"] = static_cast<int64_t>(dropout_->offset());
    absl::Time t1 = absl::Now();
    train_time_ += t1 - t0;
    if (failed_at_ != absl::InfinitePast()) {
      double s = absl::ToDoubleSeconds(t1 - failed_at_);
      recovery_s_max_ = std::max(recovery_s_max_, s);
      failed_at_ = absl::InfinitePast();
      if (leader) {
        std::printf(
            "elastic: recovered at step %lld, world size %d, generation %lld, %.3f s "
            "after the failure (t=%.3f)\n",
            static_cast<long long>(p.step), m.size, static_cast<long long>(m.generation), s,
            absl::ToDoubleSeconds(t1 - absl::UnixEpoch()));
        std::fflush(stdout);
      }
    }
    if (!data_) epoch_end = p.samples >= run_.train.size();
    if (leader && (t1 - last_progress_ >= absl::Seconds(5))) {
      last_progress_ = t1;
      std::printf("  epoch %lld  step %lld/%lld  world %d  loss %.4f\n",
                  static_cast<long long>(p.epoch + 1),
                  static_cast<long long>(p.step - p.epoch * steps_per_epoch_),
                  static_cast<long long>(steps_per_epoch_), m.size,
                  p.loss_count ? p.loss_sum / p.loss_count : 0.0);
      std::fflush(stdout);
    }
    if (epoch_end) {
      double train_loss = p.loss_count ? p.loss_sum / p.loss_count : 0.0;
      ++p.epoch;
      p.samples = 0;
      p.loss_sum = 0;
      p.loss_count = 0;
      if (leader) {
        ASSIGN_OR_RETURN(double accuracy, run_.evaluate(*model_, run_.test));
        double seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start_);
        std::printf(
            "epoch %lld/%lld  train_loss %.4f  test_accuracy %.4f  world %d  "
            "epoch_time %.2fs\n",
            static_cast<long long>(p.epoch), static_cast<long long>(run_.epochs), train_loss,
            accuracy, m.size, seconds);
        std::fflush(stdout);
        last_json_ = absl::StrFormat(
            "{\"epoch\": %d, \"steps\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, "
            "\"world_size\": %d, \"membership_changes\": %d, \"recovery_s_max\": %.3f, "
            "\"steps_rolled_back_max\": %d, \"commit_fraction\": %.4f, \"commit_bytes\": %d, "
            "\"param_hash\": \"%016x\"}",
            p.epoch, p.step, train_loss, accuracy, m.size, group_->changes(), recovery_s_max_,
            rolled_back_max_,
            absl::ToDoubleSeconds(commit_time_) /
                std::max(1e-9, absl::ToDoubleSeconds(train_time_)),
            state_->commit_bytes(), run_.param_hash(*model_));
      }
      epoch_start_ = absl::Now();
    }
    if (p.step % run_.commit_every == 0 || change.any() || epoch_end) {
      absl::Time c0 = absl::Now();
      RETURN_IF_ERROR(CommitState(comm));
      commit_time_ += absl::Now() - c0;
      if (leader) MaybeSave(m, epoch_end);
    }
    if (change.any()) {
      for (int r : change.leavers) leaving_ = leaving_ || r == m.rank;
      if (leader) {
        std::printf("elastic: membership change after step %lld: %d joining, %zu leaving\n",
                    static_cast<long long>(p.step), change.joiners, change.leavers.size());
        std::fflush(stdout);
      }
      expected_ = m.size - static_cast<int>(change.leavers.size()) + change.joiners;
      change_cause_ = absl::StrFormat("after step %d: %d joining, %d leaving", p.step,
                                      change.joiners, change.leavers.size());
      return absl::OkStatus();
    }
  }
}

int Trainer::Run() {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "fashion_mnist --elastic: %s\n", s.ToString().c_str());
    return 1;
  };
  if (absl::Status st = Setup(); !st.ok()) return fail(st);
  absl::StatusOr<std::unique_ptr<MetricsPusher>> pusher = MetricsPusher::FromEnv(&registry_, 0);
  if (!pusher.ok()) return fail(pusher.status());
  pusher_ = *std::move(pusher);
  int failures_in_a_row = 0;
  while (true) {
    absl::StatusOr<Membership> m =
        group_->Join(state_->has_commit() ? state_->committed().step : -1, expected_);
    if (absl::IsCancelled(m.status())) {
      std::printf("elastic: the job has finished; nothing to join\n");
      return 0;
    }
    if (!m.ok()) return fail(m.status());
    absl::Status st = Generation(*m);
    ddp_.reset();  // its reducer and hooks go before the communicator does
    if (st.ok()) {
      failures_in_a_row = 0;
      if (done_) {
        // The last generation's verdict on the job's last calls (a mismatch still on its way).
        if (absl::Status end = group_->comm()->Shutdown(); !end.ok()) return fail(end);
        break;
      }
      if (leaving_) {
        group_->Leave();
        std::printf("elastic: left the job after step %lld (SIGTERM)\n",
                    static_cast<long long>(state_->progress().step));
        return 0;
      }
      continue;
    }
    // A failure: roll back to the last commit and regroup with whoever is left.
    if (++failures_in_a_row > 10) return fail(Annotate(st, "10 generations failed in a row"));
    // Steps done since the last commit are redone (the work lost to this failure).
    const int64_t lost =
        state_->has_commit() ? state_->progress().step - state_->committed().step : 0;
    rolled_back_max_ = std::max(rolled_back_max_, lost);
    std::fprintf(stderr,
                 "elastic: generation %lld failed (%s); regrouping, rolling back %lld steps\n",
                 static_cast<long long>(m->generation), std::string(st.message()).c_str(),
                 static_cast<long long>(lost));
    if (failed_at_ == absl::InfinitePast()) failed_at_ = absl::Now();
    change_cause_ = absl::StrCat("generation ", m->generation, " failed: ", st.message());
    group_->Leave(st);
    if (state_->has_commit()) {
      if (absl::Status r = state_->Rollback(); !r.ok()) return fail(r);
    }
    expected_ = std::max(1, m->size - 1);
  }
  // The rank 0 of the last generation evaluated the last epoch.
  if (group_->rank() == 0 && !last_json_.empty()) std::printf("%s\n", last_json_.c_str());
  return 0;
}

}  // namespace

int RunElastic(const ElasticRun& run) {
  Trainer trainer(run);
  return trainer.Run();
}

}  // namespace paddle::examples
