// MetricsRegistry: exact values under concurrent updates, histogram buckets, the snapshot's JSON,
// the bounded event list; MetricsPusher: datagrams arrive on a UDP socket, and a pusher with no
// listener neither blocks nor fails.
#include "paddle/core/metrics_registry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/core/metrics_pusher.h"
#include "tests/testing/scoped_env.h"

namespace paddle {
namespace {

TEST(MetricsRegistryTest, CountersAreExactUnderConcurrentAdds) {
  MetricsRegistry registry;
  Counter& steps = registry.GetCounter("paddle_steps_total");
  EXPECT_EQ(&steps, &registry.GetCounter("paddle_steps_total"));
  constexpr int kThreads = 4;
  constexpr int kAdds = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) steps.Add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(steps.value(), kThreads * kAdds);
}

TEST(MetricsRegistryTest, HistogramBucketsAreUpperBoundsInclusive) {
  MetricsRegistry registry;
  Histogram& h = registry.GetHistogram("step_seconds", {0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 2.0, 3.0}) h.Observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 2, 2}));
  EXPECT_DOUBLE_EQ(h.sum(), 6.65);
}

TEST(MetricsRegistryTest, SnapshotIsJsonOfEverySetMetric) {
  MetricsRegistry registry;
  registry.GetCounter("samples_total").Add(64);
  registry.GetGauge("loss").Set(0.5);
  registry.GetGauge("never_set");
  registry.GetHistogram("wait_seconds", {1.0}).Observe(2);
  registry.RecordEvent("membership", "rank 1 \"died\"\n");
  const std::string json = registry.SnapshotJson();
  EXPECT_TRUE(
      absl::StartsWith(json,
                       "{\"counters\": {\"samples_total\": 64}, \"gauges\": {\"loss\": 0.5}, "
                       "\"histograms\": {\"wait_seconds\": {\"bounds\": [1], \"counts\": [0, 1], "
                       "\"sum\": 2}}, \"events\": [{\"seq\": 1, \"time\": "))
      << json;
  EXPECT_TRUE(
      absl::EndsWith(json, ", \"kind\": \"membership\", \"text\": \"rank 1 \\\"died\\\"\\n\"}]}"))
      << json;
}

TEST(MetricsRegistryTest, KeepsOnlyTheNewestEvents) {
  MetricsRegistry registry;
  for (int i = 1; i <= MetricsRegistry::kMaxEvents + 5; ++i) {
    registry.RecordEvent("membership", absl::StrCat("change ", i));
  }
  const std::string json = registry.SnapshotJson();
  EXPECT_FALSE(absl::StrContains(json, "\"change 5\""));
  EXPECT_TRUE(absl::StrContains(json, "\"seq\": 6,"));
  EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"change ", MetricsRegistry::kMaxEvents + 5)));
}

TEST(MetricsRegistryDeathTest, ANameHasOneKind) {
  MetricsRegistry registry;
  registry.GetCounter("steps");
  EXPECT_EQ(registry.CheckName("steps", MetricKind::kGauge).message(),
            "metric 'steps' is already registered as a counter, not a gauge");
  EXPECT_TRUE(registry.CheckName("steps", MetricKind::kCounter).ok());
  EXPECT_FALSE(registry.CheckName("Bad-Name", MetricKind::kGauge).ok());
  EXPECT_DEATH(registry.GetGauge("steps"), "already registered as a counter");
  EXPECT_DEATH(registry.GetGauge("Bad-Name"), "must match");
}

// A UDP socket on 127.0.0.1 at a free port; its address as HOST:PORT.
struct UdpListener {
  UdpListener() {
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  }
  ~UdpListener() { close(fd); }
  // The next datagram, or "" after `timeout_ms`.
  std::string Receive(int timeout_ms) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return "";
    char buffer[65536];
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }
  int fd;
  std::string address;
};

TEST(MetricsPusherTest, SendsSnapshotsEveryPeriodAndALastOne) {
  UdpListener listener;
  MetricsRegistry registry;
  Counter& steps = registry.GetCounter("paddle_steps_total");
  steps.Add(3);
  {
    auto pusher = MetricsPusher::Create(&registry, listener.address, absl::Milliseconds(20), 5);
    ASSERT_TRUE(pusher.ok()) << pusher.status();
    std::string first = listener.Receive(5000);
    EXPECT_TRUE(absl::StrContains(first, "\"rank\": 5")) << first;
    EXPECT_TRUE(absl::StrContains(first, "\"paddle_steps_total\": 3")) << first;
    steps.Add(4);
    (*pusher)->set_rank(2);
  }
  // The destructor's last snapshot has the final count; drain the ones before it.
  std::string last;
  for (std::string m = listener.Receive(1000); !m.empty(); m = listener.Receive(100)) last = m;
  EXPECT_TRUE(absl::StrContains(last, "\"paddle_steps_total\": 7")) << last;
  EXPECT_TRUE(absl::StrContains(last, "\"rank\": 2")) << last;
  EXPECT_TRUE(absl::StrContains(last, absl::StrCat("\"pid\": ", getpid()))) << last;
}

TEST(MetricsPusherTest, NoListenerNeitherBlocksNorFails) {
  std::string address;
  {
    UdpListener gone;  // a port that was free a moment ago and has no listener now
    address = gone.address;
  }
  MetricsRegistry registry;
  auto pusher = MetricsPusher::Create(&registry, address, absl::Milliseconds(1), 0);
  ASSERT_TRUE(pusher.ok()) << pusher.status();
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  pusher->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(MetricsPusherTest, FromEnvIsOffWithoutAnAddressAndRejectsBadOnes) {
  MetricsRegistry registry;
  {
    ScopedEnv unset("PADDLE_METRICS_ADDR", nullptr);
    auto pusher = MetricsPusher::FromEnv(&registry, 0);
    ASSERT_TRUE(pusher.ok());
    EXPECT_EQ(*pusher, nullptr);
  }
  ScopedEnv bad("PADDLE_METRICS_ADDR", "localhost");
  auto pusher = MetricsPusher::FromEnv(&registry, 0);
  EXPECT_FALSE(pusher.ok());
  EXPECT_TRUE(absl::StrContains(pusher.status().message(), "PADDLE_METRICS_ADDR"))
      << pusher.status();
  ScopedEnv good("PADDLE_METRICS_ADDR", "127.0.0.1:9");
  ScopedEnv zero("PADDLE_METRICS_PERIOD_S", "0");
  pusher = MetricsPusher::FromEnv(&registry, 0);
  EXPECT_FALSE(pusher.ok());
  EXPECT_TRUE(absl::StrContains(pusher.status().message(), "PADDLE_METRICS_PERIOD_S"))
      << pusher.status();
}

}  // namespace
}  // namespace paddle
