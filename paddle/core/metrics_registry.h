// MetricsRegistry: the counters, gauges and histograms a worker reports about its own run (steps,
// samples, step time, time waiting for allreduce, loss), read by a MetricsPusher that sends them
// to the launcher (paddle/core/metrics_pusher.h) and by the launcher's /metrics page
// (docs/observability.md). Not to be confused with paddle/parallel/metrics.h, which computes
// model-quality metrics (accuracy, AUC) over ranks.
//
// Note [Metrics cost]: recording stays on by default, so the hot path is a few relaxed atomic
// operations and no lock: a program looks a metric up once (GetCounter and friends take a mutex)
// and keeps the reference, which stays valid as long as the registry. Reading (SnapshotJson) may
// see one metric's update and miss another's made at the same time; a snapshot is a sample, not a
// transaction. Events (membership changes with their cause) are rare and take the mutex; the
// registry keeps the last kMaxEvents of them, so its memory is bounded however long the job runs.
//
// Thread-safety: every method may be called from any thread.
#ifndef PADDLE_CORE_METRICS_REGISTRY_H_
#define PADDLE_CORE_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace paddle {

// A value that only goes up (steps, samples, seconds spent waiting).
class Counter {
 public:
  void Add(double amount);  // amount >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (loss, generation, world size).
class Gauge {
 public:
  void Set(double value) {
    value_.store(value, std::memory_order_relaxed);
    set_.store(true, std::memory_order_relaxed);
  }
  double value() const { return value_.load(std::memory_order_relaxed); }
  bool is_set() const { return set_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
  std::atomic<bool> set_{false};  // a gauge never Set is left out of snapshots
};

// Observations counted into fixed buckets, as Prometheus histograms are: bucket i counts values
// <= bounds[i]; the last bucket, past every bound, is +Inf.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending
  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), bounds().size() + 1 of them.
  std::vector<uint64_t> counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// Bounds for durations in seconds, 1 ms to 60 s.
std::vector<double> SecondsBuckets();

enum class MetricKind { kCounter, kGauge, kHistogram };

class MetricsRegistry {
 public:
  static constexpr int kMaxEvents = 32;

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The metric called `name` ([a-z_][a-z0-9_]*), made on first use. Asking for a name already
  // used by another kind of metric is a CHECK failure (a programming error); a histogram's bounds
  // are those of its first caller. CheckName says beforehand whether a name would be accepted
  // (for names from users: the Python bindings turn its error into a ValueError).
  absl::Status CheckName(absl::string_view name, MetricKind kind) const;
  Counter& GetCounter(absl::string_view name);
  Gauge& GetGauge(absl::string_view name);
  Histogram& GetHistogram(absl::string_view name, std::vector<double> bounds = SecondsBuckets());

  // Something that happened once (kind "membership": a new generation and why). Numbered from 1;
  // only the newest kMaxEvents are kept.
  void RecordEvent(absl::string_view kind, absl::string_view text);

  // Every metric as one JSON object:
  //   {"counters": {NAME: V, ...}, "gauges": {...},
  //    "histograms": {NAME: {"bounds": [...], "counts": [...], "sum": S}, ...},
  //    "events": [{"seq": N, "time": UNIX_S, "kind": K, "text": T}, ...]}
  std::string SnapshotJson() const;

 private:
  struct Event {
    int64_t seq;
    double time;
    std::string kind;
    std::string text;
  };
  absl::Status CheckNameLocked(absl::string_view name, MetricKind kind) const;  // mu_ held
  void Claim(absl::string_view name, MetricKind kind);                          // mu_ held

  mutable std::mutex mu_;
  std::map<std::string, MetricKind, std::less<>> kinds_;                       // guarded by mu_
  std::map<std::string, std::unique_ptr<Counter>, std::less<>> counters_;      // guarded by mu_
  std::map<std::string, std::unique_ptr<Gauge>, std::less<>> gauges_;          // guarded by mu_
  std::map<std::string, std::unique_ptr<Histogram>, std::less<>> histograms_;  // guarded by mu_
  std::deque<Event> events_;                                                   // guarded by mu_
  int64_t next_event_ = 1;                                                     // guarded by mu_
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

}  // namespace paddle

#endif  // PADDLE_CORE_METRICS_REGISTRY_H_
