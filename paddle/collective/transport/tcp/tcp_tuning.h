// TcpTuning: the TCP transport's knobs, read from the environment, and the automatic wait spin.
//
// Note [Busy polling]. Two knobs trade CPU for small-message latency: a Wait() may spin before it
// sleeps (PADDLE_TCP_WAIT_SPIN_US), and the I/O thread may keep polling after its last event
// (PADDLE_TCP_BUSY_POLL_US), each saving a futex or epoll wake-up per message. Both help only
// while the spinning thread does not hold a core the peer needs: a waiter's spin (it polls the
// sockets itself, Note [Waiter drives] in tcp_progress.h) halves small-message latency with a
// core per rank and makes allreduces several times slower with more ranks than cores, and the
// busy poll hurt wherever measured (docs/performance-notes.md, "TCP busy polling"). Hence the
// wait spin is chosen per job (Note [Automatic spin]) unless set, and the busy poll stays off
// unless set. Socket buffers: kernel autotuning, which may grow the receive buffer further, is
// the default, since forcing 4 MiB showed no consistent difference.
//
// Note [Automatic spin]. OpenMPI polls without sleeping unless a node runs more ranks than it
// has cores; we do the same with PADDLE_TCP_WAIT_SPIN_US unset: a driver polls its sockets for
// kAutoWaitSpin before it sleeps when the ranks on this host (peers that published the same host
// address, threads-as-ranks included) are no more than the CPUs this process may run on, and
// never spins otherwise, where a spinning rank would hold the core its peer needs.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TUNING_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TUNING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace paddle {

struct TcpTuning {
  absl::Duration wait_spin = absl::Microseconds(0);
  bool wait_spin_auto = true;  // PADDLE_TCP_WAIT_SPIN_US unset: Note [Automatic spin]
  absl::Duration busy_poll = absl::Microseconds(0);
  int socket_buffer_bytes = 0;
  bool waiter_drives = true;  // Note [Waiter drives] in tcp_progress.h
  // Note [Unexpected-message limit] in tcp_channel.cc.
  size_t max_unexpected_bytes = size_t{4096} << 20;
};

// The spin of Note [Automatic spin] when the ranks on the host fit its CPUs.
inline constexpr absl::Duration kAutoWaitSpin = absl::Microseconds(100);

// PADDLE_TCP_WAIT_SPIN_US, PADDLE_TCP_BUSY_POLL_US (0 to 1000000), PADDLE_TCP_WAITER_READS (a
// boolean), PADDLE_SOCKET_BUFFER_BYTES (0 to 1 GiB) and PADDLE_TCP_MAX_UNEXPECTED_MB;
// kInvalidArgument naming the variable for a malformed or out-of-range value (Note [Environment
// settings] in paddle/core/env.h).
absl::StatusOr<TcpTuning> TuningFromEnv();

// The CPUs this process may run on (its affinity mask).
int UsableCpus();

// Note [Automatic spin]: `addresses` are the "host:port" every rank published (IPv6 in
// brackets), `rank` this rank's index in them.
absl::Duration AutomaticWaitSpin(absl::Span<const std::string> addresses, int rank,
                                 int usable_cpus);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TUNING_H_
