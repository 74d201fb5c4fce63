// TrainingMetrics: per-step deltas of the reducer's totals (and a new reducer's restart from
// zero), and membership changes counted with their cause.
#include "paddle/parallel/training_metrics.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(TrainingMetricsTest, StepsAddTheReducersDeltas) {
  MetricsRegistry registry;
  TrainingMetrics metrics(&registry);
  ReducerStats stats;
  stats.comm_wait_time = absl::Milliseconds(30);
  stats.bytes_reduced = 1000;
  metrics.RecordStep(absl::Milliseconds(100), 32, &stats);
  stats.comm_wait_time = absl::Milliseconds(50);
  stats.bytes_reduced = 2000;
  metrics.RecordStep(absl::Milliseconds(200), 32, &stats);
  // An elastic generation's new reducer starts from zero.
  ReducerStats fresh;
  fresh.comm_wait_time = absl::Milliseconds(5);
  fresh.bytes_reduced = 1000;
  metrics.RecordStep(absl::Milliseconds(20), 16, &fresh);
  metrics.RecordStep(absl::Milliseconds(20), 16, nullptr);
  metrics.RecordDataWait(absl::Milliseconds(7));
  metrics.RecordDataWait(absl::Milliseconds(3));

  EXPECT_EQ(registry.GetCounter("paddle_steps_total").value(), 4);
  EXPECT_EQ(registry.GetCounter("paddle_samples_total").value(), 96);
  EXPECT_NEAR(registry.GetCounter("paddle_allreduce_wait_seconds_total").value(), 0.055, 1e-12);
  EXPECT_NEAR(registry.GetGauge("paddle_last_allreduce_wait_seconds").value(), 0.005, 1e-12);
  EXPECT_EQ(registry.GetCounter("paddle_allreduce_bytes_total").value(), 3000);
  EXPECT_NEAR(registry.GetCounter("paddle_data_wait_seconds_total").value(), 0.01, 1e-12);
  const Histogram& h = registry.GetHistogram("paddle_step_seconds");
  EXPECT_NEAR(h.sum(), 0.34, 1e-12);
  uint64_t n = 0;
  for (uint64_t c : h.counts()) n += c;
  EXPECT_EQ(n, 4u);
}

TEST(TrainingMetricsTest, MembershipChangesCountAfterTheFirstGeneration) {
  MetricsRegistry registry;
  TrainingMetrics metrics(&registry);
  metrics.SetMembership(0, 1, 4, "the job started");
  EXPECT_EQ(registry.GetCounter("paddle_membership_changes_total").value(), 0);
  metrics.SetMembership(1, 0, 3, "rank 0 died");
  EXPECT_EQ(registry.GetCounter("paddle_membership_changes_total").value(), 1);
  EXPECT_EQ(registry.GetGauge("paddle_generation").value(), 1);
  EXPECT_EQ(registry.GetGauge("paddle_world_size").value(), 3);
  const std::string json = registry.SnapshotJson();
  EXPECT_TRUE(absl::StrContains(
      json, "\"text\": \"generation 1: world size 3, this worker is rank 0: rank 0 died\""))
      << json;
}

}  // namespace
}  // namespace paddle
