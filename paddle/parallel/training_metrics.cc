// The standard training metrics; see training_metrics.h.
#include "paddle/parallel/training_metrics.h"

#include "absl/strings/str_format.h"

namespace paddle {

TrainingMetrics::TrainingMetrics(MetricsRegistry* registry)
    : registry_(registry),
      steps_(registry->GetCounter("paddle_steps_total")),
      samples_(registry->GetCounter("paddle_samples_total")),
      step_seconds_(registry->GetHistogram("paddle_step_seconds")),
      allreduce_wait_(registry->GetCounter("paddle_allreduce_wait_seconds_total")),
      last_allreduce_wait_(registry->GetGauge("paddle_last_allreduce_wait_seconds")),
      allreduce_bytes_(registry->GetCounter("paddle_allreduce_bytes_total")),
      data_wait_(registry->GetCounter("paddle_data_wait_seconds_total")),
      loss_(registry->GetGauge("paddle_loss")),
      accuracy_(registry->GetGauge("paddle_accuracy")),
      generation_(registry->GetGauge("paddle_generation")),
      rank_(registry->GetGauge("paddle_rank")),
      world_size_(registry->GetGauge("paddle_world_size")),
      membership_changes_(registry->GetCounter("paddle_membership_changes_total")) {}

void TrainingMetrics::RecordStep(absl::Duration step_time, int64_t samples,
                                 const ReducerStats* stats) {
  steps_.Add(1);
  samples_.Add(static_cast<double>(samples));
  step_seconds_.Observe(absl::ToDoubleSeconds(step_time));
  if (stats == nullptr) return;
  if (stats->comm_wait_time < last_wait_ || stats->bytes_reduced < last_bytes_) {
    last_wait_ = absl::ZeroDuration();  // a new Reducer: its totals start from zero
    last_bytes_ = 0;
  }
  const double wait = absl::ToDoubleSeconds(stats->comm_wait_time - last_wait_);
  allreduce_wait_.Add(wait);
  last_allreduce_wait_.Set(wait);
  allreduce_bytes_.Add(static_cast<double>(stats->bytes_reduced - last_bytes_));
  last_wait_ = stats->comm_wait_time;
  last_bytes_ = stats->bytes_reduced;
}

void TrainingMetrics::SetMembership(int64_t generation, int rank, int size,
                                    absl::string_view cause) {
  generation_.Set(static_cast<double>(generation));
  rank_.Set(rank);
  world_size_.Set(size);
  if (!joined_) {
    joined_ = true;
    return;
  }
  membership_changes_.Add(1);
  registry_->RecordEvent("membership",
                         absl::StrFormat("generation %d: world size %d, this worker is rank %d: %s",
                                         generation, size, rank, cause));
}

}  // namespace paddle
