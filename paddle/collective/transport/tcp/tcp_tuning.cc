#include "paddle/collective/transport/tcp/tcp_tuning.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "paddle/collective/net/socket_address.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// The host part of a published "host:port" (SocketAddress's own parsing, IPv6 brackets included).
std::string HostOf(const std::string& address) {
  absl::StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  return parsed.ok() ? parsed->Host() : address;
}

}  // namespace

absl::StatusOr<TcpTuning> TuningFromEnv() {
  // Bounds and meanings: the settings table (paddle/core/settings.cc).
  TcpTuning t;
  ASSIGN_OR_RETURN(std::optional<int64_t> spin, IntSetting("PADDLE_TCP_WAIT_SPIN_US"));
  t.wait_spin_auto = !spin.has_value();
  if (spin.has_value()) t.wait_spin = absl::Microseconds(*spin);
  ASSIGN_OR_RETURN(std::optional<int64_t> poll, IntSetting("PADDLE_TCP_BUSY_POLL_US"));
  if (poll.has_value()) t.busy_poll = absl::Microseconds(*poll);
  ASSIGN_OR_RETURN(std::optional<bool> reads, BoolSetting("PADDLE_TCP_WAITER_READS"));
  t.waiter_drives = reads.value_or(t.waiter_drives);
  ASSIGN_OR_RETURN(std::optional<int64_t> buffer, IntSetting("PADDLE_SOCKET_BUFFER_BYTES"));
  t.socket_buffer_bytes = static_cast<int>(buffer.value_or(t.socket_buffer_bytes));
  ASSIGN_OR_RETURN(std::optional<int64_t> unexpected, IntSetting("PADDLE_TCP_MAX_UNEXPECTED_MB"));
  if (unexpected.has_value()) t.max_unexpected_bytes = static_cast<size_t>(*unexpected) << 20;
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
