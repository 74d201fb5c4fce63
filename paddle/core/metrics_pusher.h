// MetricsPusher: a thread that sends a MetricsRegistry's snapshot to the launcher once a period.
//
// Note [Metrics push]: each snapshot is one UDP datagram to PADDLE_METRICS_ADDR (HOST:PORT, which
// paddlerun sets to a socket of its agent on 127.0.0.1), sent from a non-blocking socket by this
// thread alone. So a training step never waits for it, and nothing piles up anywhere: a datagram
// the agent has no room for is lost, and the next one, a full snapshot again (counters are
// totals), replaces it. The datagram is a JSON object:
//   {"pid": PID, "rank": RANK, "host": HOST, "time": UNIX_S, "metrics": <SnapshotJson>}
// A snapshot larger than a datagram (64 KiB) is not sent; the first such is logged.
//
// Thread-safety: the registry must outlive the pusher; the destructor sends a last snapshot (so
// the launcher sees the final counts) and joins the thread.
#ifndef PADDLE_CORE_METRICS_PUSHER_H_
#define PADDLE_CORE_METRICS_PUSHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/core/metrics_registry.h"

namespace paddle {

class MetricsPusher {
 public:
  // A pusher to PADDLE_METRICS_ADDR every PADDLE_METRICS_PERIOD_S, or nullptr when the address is
  // unset (not launched by paddlerun, or the launcher gathers no metrics). kInvalidArgument for
  // a malformed setting.
  static absl::StatusOr<std::unique_ptr<MetricsPusher>> FromEnv(const MetricsRegistry* registry,
                                                                int rank);
  // `address` is HOST:PORT; `period` > 0.
  static absl::StatusOr<std::unique_ptr<MetricsPusher>> Create(const MetricsRegistry* registry,
                                                               const std::string& address,
                                                               absl::Duration period, int rank);
  ~MetricsPusher();
  MetricsPusher(const MetricsPusher&) = delete;
  MetricsPusher& operator=(const MetricsPusher&) = delete;

  // The rank shown with the snapshots; an elastic worker's changes with its generation.
  void set_rank(int rank) { rank_.store(rank, std::memory_order_relaxed); }
  // Snapshots sent, and those the socket refused (the agent's buffer full, or none listening).
  int64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  MetricsPusher(const MetricsRegistry* registry, int fd, absl::Duration period, int rank);
  void Run();
  void Push();

  const MetricsRegistry* registry_;
  const int fd_;  // a connected, non-blocking UDP socket
  const absl::Duration period_;
  const std::string host_;
  std::atomic<int> rank_;
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> dropped_{0};
  bool warned_too_large_ = false;  // only the thread (and, after it, the destructor) uses it
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace paddle

#endif  // PADDLE_CORE_METRICS_PUSHER_H_
