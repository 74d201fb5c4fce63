// Counters, gauges and histograms on relaxed atomics; see metrics_registry.h and Note [Metrics
// cost].
#include "paddle/core/metrics_registry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

// std::atomic<double>::fetch_add is C++20; a compare-exchange loop is what it compiles to anyway.
void AtomicAdd(std::atomic<double>& a, double amount) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + amount, std::memory_order_relaxed)) {
  }
}

bool ValidName(absl::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// JSON has no NaN or infinities; a metric that became one is shown as null.
std::string Number(double v) { return std::isfinite(v) ? absl::StrFormat("%.17g", v) : "null"; }

}  // namespace

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void Counter::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  PADDLE_CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must ascend";
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

std::vector<uint64_t> Histogram::counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> SecondsBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

absl::Status MetricsRegistry::CheckName(absl::string_view name, MetricKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckNameLocked(name, kind);
}

absl::Status MetricsRegistry::CheckNameLocked(absl::string_view name, MetricKind kind) const {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' must match [a-z_][a-z0-9_]*"));
  }
  auto it = kinds_.find(name);
  if (it != kinds_.end() && it->second != kind) {
    static constexpr const char* kNames[] = {"counter", "gauge", "histogram"};
    return absl::InvalidArgumentError(absl::StrCat(
        "metric '", name, "' is already registered as a ", kNames[static_cast<int>(it->second)],
        ", not a ", kNames[static_cast<int>(kind)]));
  }
  return absl::OkStatus();
}

void MetricsRegistry::Claim(absl::string_view name, MetricKind kind) {
  const absl::Status ok = CheckNameLocked(name, kind);
  PADDLE_CHECK(ok.ok()) << ok.message();
  kinds_.emplace(std::string(name), kind);
}

Counter& MetricsRegistry::GetCounter(absl::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, MetricKind::kCounter);
  auto& slot = counters_[std::string(name)];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::GetGauge(absl::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, MetricKind::kGauge);
  auto& slot = gauges_[std::string(name)];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::GetHistogram(absl::string_view name, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, MetricKind::kHistogram);
  auto& slot = histograms_[std::string(name)];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return *slot;
}

void MetricsRegistry::RecordEvent(absl::string_view kind, absl::string_view text) {
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({next_event_++, now, std::string(kind), std::string(text)});
  if (events_.size() > kMaxEvents) events_.pop_front();
}

std::string MetricsRegistry::SnapshotJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"counters\": {";
  const char* sep = "";
  for (const auto& [name, c] : counters_) {
    absl::StrAppend(&out, sep, JsonQuote(name), ": ", Number(c->value()));
    sep = ", ";
  }
  out += "}, \"gauges\": {";
  sep = "";
  for (const auto& [name, g] : gauges_) {
    if (!g->is_set()) continue;
    absl::StrAppend(&out, sep, JsonQuote(name), ": ", Number(g->value()));
    sep = ", ";
  }
  out += "}, \"histograms\": {";
  sep = "";
  for (const auto& [name, h] : histograms_) {
    std::vector<std::string> bounds;
    for (double b : h->bounds()) bounds.push_back(Number(b));
    absl::StrAppend(&out, sep, JsonQuote(name), ": {\"bounds\": [", absl::StrJoin(bounds, ", "),
                    "], \"counts\": [", absl::StrJoin(h->counts(), ", "),
                    "], \"sum\": ", Number(h->sum()), "}");
    sep = ", ";
  }
  out += "}, \"events\": [";
  sep = "";
  for (const Event& e : events_) {
    absl::StrAppend(&out, sep, "{\"seq\": ", e.seq, ", \"time\": ", Number(e.time),
                    ", \"kind\": ", JsonQuote(e.kind), ", \"text\": ", JsonQuote(e.text), "}");
    sep = ", ";
  }
  return out + "]}";
}

}  // namespace paddle
