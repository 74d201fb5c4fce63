// Learning-rate schedules: a pure function from the step number (counted from 0, the first
// Step()) to a learning rate, so any rank, and a job resumed from a checkpoint, computes the same
// rate from the step count alone. The training loop applies one per step:
//
//   optimizer->set_lr(schedule->LrAt(optimizer->step_count()));
//   RETURN_IF_ERROR(optimizer->Step());
//
// Each schedule is made by a static Create that validates its arguments. LrAt treats a negative
// step as step 0.
//
// Large-batch recipe (Goyal et al. 2017, "Accurate, large minibatch SGD"): scale the base rate
// with the global batch (ScaledLr), and warm up linearly to it over the first few epochs
// (WarmupLr around the decay schedule).
#ifndef PADDLE_OPTIM_LR_SCHEDULE_H_
#define PADDLE_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace paddle::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double LrAt(int64_t step) const = 0;
};

// The same rate at every step.
class ConstantLr final : public LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<ConstantLr>> Create(double lr);
  double LrAt(int64_t step) const override;

 private:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr_;
};

// base * gamma^floor(step / step_size).
class StepLr final : public LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<StepLr>> Create(double base, int64_t step_size,
                                                        double gamma);
  double LrAt(int64_t step) const override;

 private:
  StepLr(double base, int64_t step_size, double gamma)
      : base_(base), step_size_(step_size), gamma_(gamma) {}
  double base_;
  int64_t step_size_;
  double gamma_;
};

// Cosine annealing (Loshchilov and Hutter 2017, no restarts) from base at step 0 to min_lr at
// total_steps, and min_lr after:
//   min_lr + (base - min_lr) * (1 + cos(pi * step / total_steps)) / 2.
class CosineLr final : public LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<CosineLr>> Create(double base, int64_t total_steps,
                                                          double min_lr = 0.0);
  double LrAt(int64_t step) const override;

 private:
  CosineLr(double base, int64_t total_steps, double min_lr)
      : base_(base), total_steps_(total_steps), min_lr_(min_lr) {}
  double base_;
  int64_t total_steps_;
  double min_lr_;
};

// Linear warmup in front of `after`: for step < warmup_steps the rate is after(step) times a
// factor rising linearly from start_factor at step 0 to 1 at warmup_steps; from warmup_steps on
// it is after(step). `after` counts steps from the start of training, not from the end of the
// warmup, so a StepLr's boundaries or a CosineLr's total_steps keep their meaning.
class WarmupLr final : public LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<WarmupLr>> Create(std::unique_ptr<LrSchedule> after,
                                                          int64_t warmup_steps,
                                                          double start_factor);
  double LrAt(int64_t step) const override;

 private:
  WarmupLr(std::unique_ptr<LrSchedule> after, int64_t warmup_steps, double start_factor);
  std::unique_ptr<LrSchedule> after_;
  int64_t warmup_steps_;
  double start_factor_;
};

// The linear scaling rule: base_lr * global_batch / base_batch. Batches must be positive.
absl::StatusOr<double> ScaledLr(double base_lr, int64_t base_batch, int64_t global_batch);

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_LR_SCHEDULE_H_
