// fashion_mnist --data=tasks in a static group (see fashion_mnist_task_group.h).
//
// Note [Static task positions]
// A static group takes its samples from the task master as an elastic job does (Note [Task
// positions] in fashion_mnist_tasks.cc: ranks ask for tasks, the commit names every rank's tasks
// and how far each was read, used-up tasks are finished only after the commit, the epoch's tail
// ends through TaskMaster::EndEpoch). What differs is what survives a failure: the launcher
// restarts every worker, the store (rank 0 hosts it) is a new one, and the only commit left is
// the newest checkpoint. So:
//  1. Commit, every K steps (K = --checkpoint-every if set, else --commit-every) and at the
//     epoch's tail, collective: TaskData::Exchange gathers every rank's task positions and ledger
//     lines; with --checkpoint-dir rank 0 saves them in a checkpoint with the model, optimizer and
//     progress, and with the tasks of the epoch finished so far (TaskData::done) and the commit's
//     ledger lines; a barrier; then each rank finishes its used-up tasks and appends the ledger
//     lines (TaskData::AfterCommit). Nothing is finished or written to the ledger that the newest
//     checkpoint does not hold. Without --checkpoint-dir and --sample-ledger nothing keeps what
//     the allgather gathers (a restart trains from the beginning, see Not covered), so the commit
//     is only AfterCommit's finishing, with no collective.
//  2. Resume (--resume, which the restarted job runs with): every rank loads the checkpoint rank
//     0 picks (AgreeOnCheckpoint); rank 0 rebuilds the new store's task master from it
//     (TaskMaster::Restore: its epoch, its done tasks, every other task in todo) and appends its
//     ledger lines again (a crash between the save and the append would lose them;
//     tools/ledger-check counts identical lines once); after a barrier the ranks adopt the
//     commit's open tasks at their positions (TaskData::StartGeneration, generation = the
//     launcher's restart count, which tags the ledger lines).
//  3. The steps after the checkpoint are redone; their earlier lines were never written.
// So every sample of an epoch is in exactly one update of the model the newest checkpoint (or the
// run's end) holds. Not covered: a restart without --checkpoint-dir and --resume trains from the
// beginning again (the ledger of the failed attempt then shows repeats); and the train loss
// printed for an epoch that was resumed counts the resumed part from rank 0's share only.
#include "examples/fashion_mnist_task_group.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "examples/fashion_mnist_tasks.h"
#include "examples/launched_group.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/checkpoint/checkpoint_agreement.h"
#include "paddle/core/status.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/models.h"
#include "paddle/optim/lr_schedule.h"
#include "paddle/parallel/distributed_data_parallel.h"
#include "paddle/parallel/elastic_state.h"
#include "paddle/parallel/global_batch.h"

namespace paddle::examples {
namespace {

class TaskGroupTrainer {
 public:
  explicit TaskGroupTrainer(const ElasticRun& run) : run_(run) {}
  int Run();

 private:
  absl::Status Setup();
  // --resume: the checkpoint rank 0 picks, on every rank, and the task master rebuilt from it.
  absl::Status Resume();
  // Note [Static task positions], step 1.
  absl::Status Commit();
  // The epoch's tail (no rank had a sample): commit, meet, rank 0 ends the epoch if it can.
  absl::StatusOr<bool> EndEpoch();
  absl::Status Train();
  Communicator& comm() { return *group_.comm; }

  const ElasticRun& run_;
  LaunchedGroup group_;  // before data_: its store outlives the task master
  std::shared_ptr<nn::Generator> dropout_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<ElasticState> state_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<TaskData> data_;
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  int64_t commit_every_ = 10;
  int64_t restarts_ = 0;
  std::string last_json_;
};

absl::Status TaskGroupTrainer::Setup() {
  if (!StartedAsGroup()) {
    return absl::InvalidArgumentError(
        "--data=tasks: start the workers with the launcher (tools/launch or paddlerun): the "
        "group's store holds the task master");
  }
  if (const char* r = std::getenv("PADDLE_RESTART_COUNT"); r != nullptr) {
    if (!absl::SimpleAtoi(r, &restarts_) || restarts_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data=tasks: PADDLE_RESTART_COUNT is '", r, "', not a count"));
    }
  }
  RETURN_IF_ERROR(JoinLaunchedGroup(Backend::kNative, &group_));
  dropout_ = std::make_shared<nn::Generator>(static_cast<uint64_t>(run_.seed),
                                             1 + static_cast<uint64_t>(group_.rank));
  ASSIGN_OR_RETURN(model_, nn::MakeModel(run_.model, static_cast<uint64_t>(run_.seed), dropout_));
  ASSIGN_OR_RETURN(opt_, run_.make_optimizer(model_->Parameters()));
  state_ = std::make_unique<ElasticState>(model_.get(), opt_.get());
  state_->extras()["rng/dropout_offset"] = 0;
  if (!run_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<checkpoint::CheckpointManager>(
        run_.checkpoint_dir, static_cast<int>(run_.keep_checkpoints));
  }
  commit_every_ =
      checkpoints_ && run_.checkpoint_every > 0 ? run_.checkpoint_every : run_.commit_every;
  TaskDataOptions to = run_.tasks;
  to.commit_every = commit_every_;
  ASSIGN_OR_RETURN(data_, TaskData::Create(group_.rendezvous.store.get(), to));
  data_->InitExtras(state_->extras());
  if (run_.resume) RETURN_IF_ERROR(Resume());
  RETURN_IF_ERROR(comm().Barrier()->Wait());  // the master is restored before anyone asks
  RETURN_IF_ERROR(data_->StartGeneration(state_->extras(), state_->progress().epoch, restarts_,
                                         group_.rank, group_.world));
  RETURN_IF_ERROR(comm().Barrier()->Wait());  // every adoption is in before anyone asks
  DdpOptions ddp_options;
  ddp_options.bucket_bytes = static_cast<int64_t>(run_.bucket_cap_mb * (1 << 20));
  ddp_options.first_bucket_bytes = static_cast<int64_t>(run_.first_bucket_mb * (1 << 20));
  ddp_options.store = group_.rendezvous.store;
  ASSIGN_OR_RETURN(ddp_, DistributedDataParallel::Create(model_, group_.comm.get(), ddp_options));
  const int64_t steps_per_epoch = StepsPerEpoch(data_->num_samples(), run_.batch);
  ASSIGN_OR_RETURN(
      std::unique_ptr<optim::CosineLr> cosine,
      optim::CosineLr::Create(opt_->lr(), std::max<int64_t>(steps_per_epoch * run_.epochs, 1)));
  ASSIGN_OR_RETURN(
      schedule_,
      optim::WarmupLr::Create(std::move(cosine), std::llround(run_.warmup_epochs * steps_per_epoch),
                              /*start_factor=*/0.1));
  if (group_.rank == 0) {
    std::printf(
        "fashion_mnist: --data=tasks, model %s (%lld parameters), batch %lld, %d workers, "
        "%lld train samples in %s, a commit every %lld steps%s\n",
        run_.model.c_str(), static_cast<long long>(model_->NumParameters()),
        static_cast<long long>(run_.batch), group_.world,
        static_cast<long long>(data_->num_samples()), run_.tasks.shards_dir.c_str(),
        static_cast<long long>(commit_every_), checkpoints_ ? " (each a checkpoint)" : "");
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status TaskGroupTrainer::Resume() {
  if (!checkpoints_) return absl::InvalidArgumentError("--resume needs --checkpoint-dir");
  absl::StatusOr<checkpoint::LoadedCheckpoint> loaded =
      checkpoint::AgreeOnCheckpoint(comm(), *checkpoints_);
  if (absl::IsNotFound(loaded.status())) {
    if (group_.rank == 0) {
      std::printf("fashion_mnist: no checkpoint to resume in %s; starting from the beginning\n",
                  run_.checkpoint_dir.c_str());
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(loaded.status());
  RETURN_IF_ERROR(Annotate(state_->FromCheckpoint(loaded->state), loaded->path));
  dropout_->set_offset(static_cast<uint64_t>(state_->extras()["rng/dropout_offset"]));
  auto text = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = loaded->state.strings.find(key);
    if (it != loaded->state.strings.end()) return it->second;
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", loaded->path, " has no string '", key,
        "': it was not written by fashion_mnist --data=tasks; use another --checkpoint-dir"));
  };
  ASSIGN_OR_RETURN(std::string done_text, text("data/done"));
  ASSIGN_OR_RETURN(std::string ledger, text("data/ledger"));
  std::vector<int64_t> done;
  for (absl::string_view id : absl::StrSplit(done_text, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(id, &v)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", loaded->path, ": 'data/done' holds '",
                                              id, "', not a task id"));
    }
    done.push_back(v);
  }
  const TrainProgress& p = state_->progress();
  const bool leader = group_.rank == 0;
  RETURN_IF_ERROR(Annotate(data_->RestoreDone(p.epoch, std::move(done), leader), loaded->path));
  if (!leader) return absl::OkStatus();
  RETURN_IF_ERROR(data_->AppendLedger(ledger));
  std::printf("resumed from %s (step %lld, epoch %lld, sample %lld, %zu tasks done)\n",
              loaded->path.c_str(), static_cast<long long>(p.step),
              static_cast<long long>(p.epoch + 1), static_cast<long long>(p.samples),
              data_->done().size());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status TaskGroupTrainer::Commit() {
  // Note [Static task positions], step 1: nothing to keep, no exchange.
  if (!checkpoints_ && run_.tasks.ledger_dir.empty()) return data_->AfterCommit();
  state_->extras()["rng/dropout_offset"] = static_cast<int64_t>(dropout_->offset());
  RETURN_IF_ERROR(data_->Exchange(comm(), state_->extras()));
  if (checkpoints_) {
    RETURN_IF_ERROR(state_->Commit());
    if (group_.rank == 0) {
      ASSIGN_OR_RETURN(checkpoint::CheckpointState ckpt, state_->ToCheckpoint());
      ckpt.strings["data/done"] = absl::StrJoin(data_->done(), ",");
      ckpt.strings["data/ledger"] = data_->CommittingLedger();
      RETURN_IF_ERROR(checkpoints_->Save(state_->committed().step, ckpt));
    }
    RETURN_IF_ERROR(comm().Barrier()->Wait());  // saved before anything is finished
  }
  return data_->AfterCommit();
}

absl::StatusOr<bool> TaskGroupTrainer::EndEpoch() {
  RETURN_IF_ERROR(Commit());
  RETURN_IF_ERROR(comm().Barrier()->Wait());  // every rank has finished its used-up tasks
  ASSIGN_OR_RETURN(Tensor verdict, Tensor::Zeros({1}, DType::kInt64));
  if (group_.rank == 0) {
    ASSIGN_OR_RETURN(bool over, data_->EndEpoch(state_->progress().epoch));
    verdict.data<int64_t>()[0] = over ? 1 : 0;
  }
  RETURN_IF_ERROR(comm().Broadcast(verdict, 0)->Wait());
  return verdict.data<int64_t>()[0] == 1;
}

absl::Status TaskGroupTrainer::Train() {
  TrainProgress& p = state_->progress();
  const bool leader = group_.rank == 0;
  absl::Time start = absl::Now();
  int64_t samples = 0;  // this epoch's, since start
  while (p.epoch < run_.epochs) {
    ASSIGN_OR_RETURN(TaskData::StepSamples s,
                     data_->TakeStep(comm(), p.epoch, p.step + 1, run_.batch));
    if (s.global == 0) {
      ASSIGN_OR_RETURN(bool ended, EndEpoch());
      if (!ended) continue;
      data_->EpochEnded();
      std::vector<double> loss = {p.loss_sum, static_cast<double>(p.loss_count)};
      ASSIGN_OR_RETURN(Tensor t,
                       Tensor::FromBlob(loss.data(), {2}, DType::kFloat64, Device::Cpu()));
      RETURN_IF_ERROR(comm().Allreduce(t, ReduceOp::kSum)->Wait());
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      // loss[0]: the steps' global means (every rank adds its part); loss[1]: steps x ranks.
      const double train_loss = loss[1] > 0 ? loss[0] * group_.world / loss[1] : 0.0;
      ++p.epoch;
      p.samples = 0;
      p.loss_sum = 0;
      p.loss_count = 0;
      if (leader) {
        ASSIGN_OR_RETURN(double accuracy, run_.evaluate(*model_, run_.test));
        const double rate = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0;
        std::printf(
            "epoch %lld/%lld  train_loss %.4f  test_accuracy %.4f  samples/s %.0f  "
            "epoch_time %.2fs\n",
            static_cast<long long>(p.epoch), static_cast<long long>(run_.epochs), train_loss,
            accuracy, rate, seconds);
        std::fflush(stdout);
        last_json_ = absl::StrFormat(
            "{\"epoch\": %d, \"steps\": %d, \"train_loss\": %.6f, \"test_accuracy\": %.4f, "
            "\"samples_per_s\": %.1f, \"epoch_time_s\": %.3f, \"world_size\": %d, "
            "\"data\": \"tasks\", \"param_hash\": \"%016x\"}",
            p.epoch, p.step, train_loss, accuracy, rate, seconds, group_.world,
            run_.param_hash(*model_));
      }
      RETURN_IF_ERROR(Commit());  // the start of the next epoch
      start = absl::Now();
      samples = 0;
      continue;
    }
    opt_->set_lr(schedule_->LrAt(p.step));
    opt_->ZeroGrad();
    ASSIGN_OR_RETURN(nn::Variable logits, ddp_->Forward(nn::Variable(s.images)));
    ASSIGN_OR_RETURN(nn::Variable loss, nn::functional::SoftmaxCrossEntropy(logits, s.labels));
    // DDP averages over ranks: weighted by this rank's share of --batch (Note [Short steps] in
    // fashion_mnist_tasks.cc; 0 for the dummy row of a rank that had none).
    ASSIGN_OR_RETURN(Tensor weight, Tensor::Empty(loss.shape(), DType::kFloat32));
    weight.data<float>()[0] = static_cast<float>(ShortStepWeight(s.got, group_.world, run_.batch));
    // The printed loss stays the mean over the step's samples.
    const double share = static_cast<double>(s.got) / static_cast<double>(s.global);
    ASSIGN_OR_RETURN(nn::Variable weighted, nn::functional::Mul(loss, nn::Variable(weight)));
    RETURN_IF_ERROR(ddp_->Backward(weighted));
    RETURN_IF_ERROR(opt_->Step());
    ++p.step;
    p.samples += s.global;
    samples += s.global;
    if (s.got > 0) p.loss_sum += loss.data().data<float>()[0] * share;
    ++p.loss_count;
    if (p.step % commit_every_ == 0) RETURN_IF_ERROR(Commit());
  }
  return absl::OkStatus();
}

int TaskGroupTrainer::Run() {
  auto fail = [this](const absl::Status& s) {
    std::fprintf(stderr, "fashion_mnist --data=tasks (rank %d): %s\n", group_.rank,
                 s.ToString().c_str());
    FailLaunchedGroup(s, &group_);  // the peers quote it; the launcher hears of it now
    return 1;
  };
  if (absl::Status st = Setup(); !st.ok()) return fail(st);
  if (absl::Status st = Train(); !st.ok()) return fail(st);
  ddp_.reset();  // its reducer and hooks go before the communicator does
  // The communicator's verdict on the job's last calls (a mismatch still on its way).
  if (absl::Status st = group_.comm->Shutdown(); !st.ok()) return fail(st);
  if (group_.rank == 0 && !last_json_.empty()) std::printf("%s\n", last_json_.c_str());
  return 0;
}

}  // namespace

int RunTaskGroup(const ElasticRun& run) {
  TaskGroupTrainer trainer(run);
  return trainer.Run();
}

}  // namespace paddle::examples
