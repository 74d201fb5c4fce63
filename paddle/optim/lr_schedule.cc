// Learning-rate schedules and the linear scaling rule.
#include "paddle/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paddle::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status CheckRate(const char* schedule, const char* what, double lr) {
  if (std::isfinite(lr) && lr >= 0.0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(schedule, ": ", what, " must be finite and >= 0, got ", lr));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConstantLr>> ConstantLr::Create(double lr) {
  if (absl::Status s = CheckRate("ConstantLr", "lr", lr); !s.ok()) return s;
  return std::unique_ptr<ConstantLr>(new ConstantLr(lr));
}

double ConstantLr::LrAt(int64_t /*step*/) const { return lr_; }

absl::StatusOr<std::unique_ptr<StepLr>> StepLr::Create(double base, int64_t step_size,
                                                       double gamma) {
  if (absl::Status s = CheckRate("StepLr", "base", base); !s.ok()) return s;
  if (step_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepLr: step_size must be > 0, got ", step_size));
  }
  if (!(std::isfinite(gamma) && gamma > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepLr: gamma must be finite and > 0, got ", gamma));
  }
  return std::unique_ptr<StepLr>(new StepLr(base, step_size, gamma));
}

double StepLr::LrAt(int64_t step) const {
  const int64_t decays = std::max<int64_t>(step, 0) / step_size_;
  return base_ * std::pow(gamma_, static_cast<double>(decays));
}

absl::StatusOr<std::unique_ptr<CosineLr>> CosineLr::Create(double base, int64_t total_steps,
                                                           double min_lr) {
  if (absl::Status s = CheckRate("CosineLr", "base", base); !s.ok()) return s;
  if (absl::Status s = CheckRate("CosineLr", "min_lr", min_lr); !s.ok()) return s;
  if (min_lr > base) {
    return absl::InvalidArgumentError(
        absl::StrCat("CosineLr: min_lr ", min_lr, " is above base ", base));
  }
  if (total_steps <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CosineLr: total_steps must be > 0, got ", total_steps));
  }
  return std::unique_ptr<CosineLr>(new CosineLr(base, total_steps, min_lr));
}

double CosineLr::LrAt(int64_t step) const {
  const int64_t s = std::clamp<int64_t>(step, 0, total_steps_);
  if (s == total_steps_) return min_lr_;  // exact, not min_lr + rounding error
  const double progress = static_cast<double>(s) / static_cast<double>(total_steps_);
  return min_lr_ + (base_ - min_lr_) * 0.5 * (1.0 + std::cos(kPi * progress));
}

WarmupLr::WarmupLr(std::unique_ptr<LrSchedule> after, int64_t warmup_steps, double start_factor)
    : after_(std::move(after)), warmup_steps_(warmup_steps), start_factor_(start_factor) {}

absl::StatusOr<std::unique_ptr<WarmupLr>> WarmupLr::Create(std::unique_ptr<LrSchedule> after,
                                                           int64_t warmup_steps,
                                                           double start_factor) {
  if (after == nullptr) {
    return absl::InvalidArgumentError("WarmupLr: the schedule after the warmup is null");
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WarmupLr: warmup_steps must be >= 0, got ", warmup_steps));
  }
  if (!(start_factor >= 0.0 && start_factor <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WarmupLr: start_factor must be in [0, 1], got ", start_factor));
  }
  return std::unique_ptr<WarmupLr>(new WarmupLr(std::move(after), warmup_steps, start_factor));
}

double WarmupLr::LrAt(int64_t step) const {
  const int64_t s = std::max<int64_t>(step, 0);
  const double lr = after_->LrAt(s);
  if (s >= warmup_steps_) return lr;
  const double progress = static_cast<double>(s) / static_cast<double>(warmup_steps_);
  return lr * (start_factor_ + (1.0 - start_factor_) * progress);
}

absl::StatusOr<double> ScaledLr(double base_lr, int64_t base_batch, int64_t global_batch) {
  if (base_batch <= 0 || global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaledLr: batch sizes must be > 0, got base_batch ", base_batch,
                     ", global_batch ", global_batch));
  }
  if (absl::Status s = CheckRate("ScaledLr", "base_lr", base_lr); !s.ok()) return s;
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace paddle::optim
