#include "paddle/collective/transport/tcp/tcp_tuning.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "paddle/collective/transport/tcp/socket_address.h"
#include "paddle/core/env.h"
#include "paddle/core/logging.h"
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
  // Spins and polls longer than a second only burn CPU; 1 GiB is far above any kernel's limit.
  constexpr int64_t kMaxMicros = 1000000;
  TcpTuning t;
  ASSIGN_OR_RETURN(std::optional<int64_t> spin,
                   IntFromEnv("PADDLE_TCP_WAIT_SPIN_US", 0, kMaxMicros,
                              "microseconds a TCP wait polls before sleeping; unset: automatic"));
  t.wait_spin_auto = !spin.has_value();
  if (spin.has_value()) t.wait_spin = absl::Microseconds(*spin);
  ASSIGN_OR_RETURN(std::optional<int64_t> poll,
                   IntFromEnv("PADDLE_TCP_BUSY_POLL_US", 0, kMaxMicros,
                              "microseconds the I/O thread polls after its last event"));
  if (poll.has_value()) t.busy_poll = absl::Microseconds(*poll);
  ASSIGN_OR_RETURN(std::optional<bool> reads,
                   BoolFromEnv("PADDLE_TCP_WAITER_READS",
                               "whether a waiting thread moves the sockets' data itself"));
  t.waiter_drives = reads.value_or(t.waiter_drives);
  ASSIGN_OR_RETURN(std::optional<int64_t> buffer,
                   IntFromEnv("PADDLE_SOCKET_BUFFER_BYTES", 0, int64_t{1} << 30,
                              "SO_SNDBUF/SO_RCVBUF in bytes; 0 leaves them to the kernel"));
  t.socket_buffer_bytes = static_cast<int>(buffer.value_or(t.socket_buffer_bytes));
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
