// The UCX transport: a Transport (paddle/collective/transport/transport.h) over UCX's UCP tag API,
// one UCP worker and endpoint per peer (Note [One worker per peer] in ucx_channel.h).
//
// The pieces, each in its own file:
//   ucx_error      ucs_status_t -> absl::Status (UCX_RETURN_IF_ERROR)
//   ucx_channel    one peer's worker and endpoint: tag sends/receives, failure, teardown
//   ucx_request    one posted send or receive and its completion
//   ucx_transport  the UCP context, setup through the store, waiting, poisoning
//
// Setup: each rank creates one worker per peer and publishes its address under
// "<store_prefix>/ucx/<rank>/<peer>", reads the peer's counterpart, connects an endpoint with
// UCP_ERR_HANDLING_MODE_PEER (a dead peer fails requests instead of hanging them) and exchanges a
// hello active message both ways, all within TransportOptions.connect_timeout.
//
// Progress: there is no progress thread. Wait() drives ucp_worker_progress on the calling thread
// for every peer's worker, spins a little, then sleeps on the workers' event fds
// (Note [Waiting] in ucx_transport.cc).
//
// UCX's own configuration is respected: UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_THRESH and every other
// UCX_* variable apply as usual. Note that UCX 1.13 refuses its shared-memory transports (sysv,
// posix: "no peer failure handler") for endpoints with UCP_ERR_HANDLING_MODE_PEER, which we need
// so a dead peer fails requests instead of hanging them: by default UCX therefore carries
// messages over tcp (with cma for large ones where it picks it), and UCX_TLS=sm,cma alone fails
// at connect with "Destination is unreachable". The transport changes four UCX defaults, each only
// when its variable is unset:
//   UCX_KEEPALIVE_INTERVAL=1s   (UCX's default, 20 s, would let a killed peer on a shared-memory
//                                link go unnoticed for that long)
//   UCX_ZCOPY_THRESH=inf        (UCX 1.13's tcp transport aborts the survivor when a peer dies
//                                during a zero-copy send: Note [UCX zero-copy over TCP] in
//                                ucx_transport.cc)
//   UCX_TCP_TX_SEG_SIZE=256k, UCX_TCP_RX_SEG_SIZE=256k  (tcp's 8 KiB segments made those copied
//                                sends 2-3x slower; same Note)
// TransportOptions.interface_name is not used: UCX_NET_DEVICES chooses the devices.
// Own tuning, read when a transport is created:
//   PADDLE_UCX_WAIT_SPIN_US     a Wait() keeps progressing this long after the last event before
//                               it sleeps on the event fds (default 20)
#ifndef PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Connects this rank to every other rank of options.world_size through options.store, within
// options.connect_timeout. name() is "ucx". Errors name this rank, the peer and what to change.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const TransportOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_TRANSPORT_H_
