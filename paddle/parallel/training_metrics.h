// TrainingMetrics: the metrics every training loop reports, under the names docs/observability.md
// documents (paddle_steps_total, paddle_step_seconds, ...), on a MetricsRegistry
// (paddle/core/metrics_registry.h) that a MetricsPusher sends to the launcher.
//
// A loop calls RecordStep once per optimizer step. Given DDP's ReducerStats, it adds what the
// step added to them: the time FinalizeBackward waited for gradient allreduces and the bucket
// bytes reduced. The stats are totals per Reducer; a new Reducer (an elastic generation makes
// one) starts again from zero, which RecordStep notices and follows.
//
// Thread-safety: one training thread calls it; the registry may be read from any thread.
#ifndef PADDLE_PARALLEL_TRAINING_METRICS_H_
#define PADDLE_PARALLEL_TRAINING_METRICS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/core/metrics_registry.h"
#include "paddle/parallel/reducer/reducer.h"

namespace paddle {

class TrainingMetrics {
 public:
  explicit TrainingMetrics(MetricsRegistry* registry);

  // One step of `samples` samples on this rank, which took `step_time`. `stats`: the DDP's
  // reducer().stats() after the step, or nullptr without DDP.
  void RecordStep(absl::Duration step_time, int64_t samples, const ReducerStats* stats);
  // Time the step waited for its batch (the data loader's queue, or the task master).
  void RecordDataWait(absl::Duration wait) { data_wait_.Add(absl::ToDoubleSeconds(wait)); }
  void SetLoss(double loss) { loss_.Set(loss); }
  void SetAccuracy(double accuracy) { accuracy_.Set(accuracy); }
  // This worker joined `generation` as `rank` of `size`. Every call after the first counts as a
  // membership change, recorded as an event with `cause` ("rank 3 died: ...", "a worker joined").
  void SetMembership(int64_t generation, int rank, int size, absl::string_view cause);

 private:
  MetricsRegistry* registry_;
  Counter& steps_;
  Counter& samples_;
  Histogram& step_seconds_;
  Counter& allreduce_wait_;
  Gauge& last_allreduce_wait_;
  Counter& allreduce_bytes_;
  Counter& data_wait_;
  Gauge& loss_;
  Gauge& accuracy_;
  Gauge& generation_;
  Gauge& rank_;
  Gauge& world_size_;
  Counter& membership_changes_;
  bool joined_ = false;
  absl::Duration last_wait_;  // the stats' totals at the previous step
  int64_t last_bytes_ = 0;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_TRAINING_METRICS_H_
