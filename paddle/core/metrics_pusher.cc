// One datagram per period from a non-blocking UDP socket; see Note [Metrics push].
#include "paddle/core/metrics_pusher.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

constexpr size_t kMaxDatagram = 65000;  // under UDP's 65,507-byte payload limit

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsPusher>> MetricsPusher::FromEnv(
    const MetricsRegistry* registry, int rank) {
  std::optional<std::string> address = StringSetting("PADDLE_METRICS_ADDR");
  if (!address.has_value()) return std::unique_ptr<MetricsPusher>();
  absl::StatusOr<std::optional<absl::Duration>> period = SecondsSetting("PADDLE_METRICS_PERIOD_S");
  if (!period.ok()) return period.status();
  if (period->has_value() && **period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "PADDLE_METRICS_PERIOD_S=0: the seconds between metrics snapshots must be above 0");
  }
  return Create(registry, *address, period->value_or(absl::Seconds(1)), rank);
}

absl::StatusOr<std::unique_ptr<MetricsPusher>> MetricsPusher::Create(
    const MetricsRegistry* registry, const std::string& address, absl::Duration period, int rank) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PADDLE_METRICS_ADDR=\"", address,
                                                   "\" is not HOST:PORT (where to send metrics)"));
  }
  if (period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the metrics period must be above 0 s, not ", absl::FormatDuration(period)));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PADDLE_METRICS_ADDR=\"", address, "\" does not resolve: ", gai_strerror(rc)));
  }
  int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int error = errno;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    error = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open a UDP socket to PADDLE_METRICS_ADDR=", address, ": ", std::strerror(error)));
  }
  return std::unique_ptr<MetricsPusher>(new MetricsPusher(registry, fd, period, rank));
}

MetricsPusher::MetricsPusher(const MetricsRegistry* registry, int fd, absl::Duration period,
                             int rank)
    : registry_(registry), fd_(fd), period_(period), host_(HostName()), rank_(rank) {
  thread_ = std::thread([this] { Run(); });
}

MetricsPusher::~MetricsPusher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Push();
  close(fd_);
}

void MetricsPusher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(period_), [this] { return stop_; })) {
    lock.unlock();
    Push();
    lock.lock();
  }
}

void MetricsPusher::Push() {
  const std::string message = absl::StrFormat(
      R"({"pid": %d, "rank": %d, "host": %s, "time": %.3f, "metrics": %s})", getpid(),
      rank_.load(std::memory_order_relaxed), JsonQuote(host_),
      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()), registry_->SnapshotJson());
  if (message.size() > kMaxDatagram) {
    if (!warned_too_large_) {
      PADDLE_LOG(WARN, TRAIN) << "metrics snapshot of " << message.size()
                              << " bytes exceeds a datagram (" << kMaxDatagram
                              << "); not sent: fewer metrics, or fewer histogram buckets";
      warned_too_large_ = true;
    }
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Never blocks: a full socket buffer (EAGAIN) or no listener (ECONNREFUSED) drops this one.
  if (send(fd_, message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  } else {
    sent_.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace paddle
