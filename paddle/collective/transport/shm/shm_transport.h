// The shared-memory transport: a Transport (paddle/collective/transport/transport.h) between the
// ranks of one host, through rings in POSIX shared memory, with single-copy large messages by
// cross-memory attach (process_vm_readv).
//
// The pieces, each in its own file:
//   shm_ring      the segment layout, the per-pair rings and the doorbell (Note [Doorbell]), and
//                 the checks of everything a peer writes (Note [Untrusted rings])
//   cma           process_vm_readv reads and the setup probe
//   shm_channel   one peer's link: eager, CMA and streamed messages, matching, failure
//   shm_transport setup through the store (Note [Shm setup]), progress, poisoning
// and the primitives it builds on: shm_segment, shm_signal, peer_process, host_identity.
//
// Progress: the thread that waits drives it (reads the rings, does the CMA copies), spinning for
// DefaultShmSpin(world size) and then sleeping on its doorbell. A background thread makes
// progress only while no thread of this transport waits (a receive posted and never waited on
// while the peer waits for its send), sleeping on the doorbell otherwise idle.
//
// Environment, read when a transport is created:
//   PADDLE_SHM_CMA=0     stream large messages through the rings instead of CMA
//   PADDLE_SHM_SPIN_US   how long a waiter spins before sleeping (shm_signal.h)
//   PADDLE_HOST_ID       replaces the host identity (host_identity.h)
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_TRANSPORT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

// Connects this rank to every other rank of options.world_size through options.store (keys under
// options.store_prefix + "/shm/"), within options.connect_timeout. All ranks must run on one host
// (kFailedPrecondition naming each rank's host otherwise). world_size 1 needs no store.
// options.interface_name is not used. name() is "shm".
absl::StatusOr<std::unique_ptr<Transport>> CreateShmTransport(const TransportOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_SHM_TRANSPORT_H_
