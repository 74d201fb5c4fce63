// The TCP transport: a Transport (paddle/collective/transport/transport.h) over one TCP
// connection per pair of ranks, driven by one epoll I/O thread per transport.
//
// The pieces, each in its own file (the address to listen on and advertise, and its "host:port"
// text, is paddle/collective/net/socket_address.h, shared with the TCP store and Gloo):
//   tcp_socket      deadline-bounded socket calls for connection setup
//   tcp_wire        the handshake and the message header on the wire
//   tcp_mesh        full-mesh setup through the store (Note [Full-mesh setup])
//   tcp_loop        the epoll thread
//   tcp_channel     one peer's link: framing, matching, zero-copy receives (tcp_channel.cc),
//                   failure, abort frames and closing (tcp_channel_close.cc)
//   tcp_request     one posted send or receive and its completion
//   tcp_progress    the progress engine that waiting threads drive (Note [Waiter drives])
//   tcp_tuning      the knobs below and the automatic wait spin (Note [Automatic spin])
//
// Tuning, read from the environment when a transport is created (the defaults are what
// bench/micro/transport_bench measured best; see Note [Busy polling] in tcp_tuning.h):
//   PADDLE_TCP_WAIT_SPIN_US      a Wait() polls this long before sleeping (unset: 100 when the
//                                ranks on this host fit its CPUs, else 0; Note [Automatic spin])
//   PADDLE_TCP_BUSY_POLL_US      the I/O thread keeps polling this long after its last event
//   PADDLE_TCP_WAITER_READS      1 (default): a thread waiting for a send or receive moves the
//                                data of every socket itself (Note [Waiter drives] in
//                                tcp_progress.h); 0: only the I/O thread does
//   PADDLE_SOCKET_BUFFER_BYTES   minimum SO_SNDBUF/SO_RCVBUF (0: leave them to the kernel; see
//                                Note [Socket buffers] in tcp_socket.cc)
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Connects this rank to every other rank of options.world_size through options.store, within
// options.connect_timeout. Errors name this rank, the peer and its address, and what to change.
absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_TRANSPORT_H_
