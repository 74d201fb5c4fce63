#include "paddle/collective/transport/tcp/tcp_tuning.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "paddle/collective/transport/tcp/socket_address.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(env, &value) || value < 0) {
    PADDLE_LOG(WARN, NET) << name << "='" << env << "' is not a non-negative integer; using "
                          << fallback;
    return fallback;
  }
  return value;
}

// The host part of a published "host:port" (SocketAddress's own parsing, IPv6 brackets included).
std::string HostOf(const std::string& address) {
  absl::StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  return parsed.ok() ? parsed->Host() : address;
}

}  // namespace

TcpTuning TuningFromEnv() {
  TcpTuning defaults;
  TcpTuning t;
  const char* spin = std::getenv("PADDLE_TCP_WAIT_SPIN_US");
  t.wait_spin_auto = spin == nullptr || *spin == '\0';
  t.wait_spin = absl::Microseconds(
      EnvInt("PADDLE_TCP_WAIT_SPIN_US", absl::ToInt64Microseconds(defaults.wait_spin)));
  t.busy_poll = absl::Microseconds(
      EnvInt("PADDLE_TCP_BUSY_POLL_US", absl::ToInt64Microseconds(defaults.busy_poll)));
  t.waiter_drives = EnvInt("PADDLE_TCP_WAITER_READS", defaults.waiter_drives ? 1 : 0) != 0;
  t.socket_buffer_bytes = static_cast<int>(std::min<int64_t>(
      EnvInt("PADDLE_SOCKET_BUFFER_BYTES", defaults.socket_buffer_bytes), 1 << 30));
  return t;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::Duration AutomaticWaitSpin(absl::Span<const std::string> addresses, int rank,
                                 int usable_cpus) {
  const std::string host = HostOf(addresses[rank]);
  int local = 0;
  for (const std::string& address : addresses) {
    if (HostOf(address) == host) ++local;
  }
  const absl::Duration spin = local <= usable_cpus ? kAutoWaitSpin : absl::ZeroDuration();
  PADDLE_LOG(DEBUG, NET) << local << " rank(s) on this host (" << host << "), " << usable_cpus
                         << " usable CPU(s): waiters spin " << spin << " before sleeping";
  return spin;
}

}  // namespace paddle
