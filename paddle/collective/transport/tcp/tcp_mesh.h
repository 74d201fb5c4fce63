// Full-mesh connection setup of the TCP transport: one connected, handshaken socket to every
// other rank, found through the store.
//
// Note [Full-mesh setup], for rank r of n:
//  1. Listen on an ephemeral port of the chosen address (Note [Choosing the listen address]).
//  2. Read the transport secret from `<prefix>/secret`; the first rank to arrive creates it
//     (CompareSet), so no rank has to come first (Note [Transport secret] in tcp_mesh.cc).
//  3. Publish "host:port" ("[host]:port" for IPv6) under `<prefix>/addr/<r>`.
//  4. Accept a connection from every lower rank, in whatever order they come, answering each
//     handshake (Note [TCP transport wire format]). Handshakes run side by side (at most 64 at
//     once, the oldest dropped past that), so silent connections cannot use up the deadline. A
//     connection that is not from this job (a foreign protocol, another job id, no proof of the
//     secret) is rejected and logged, and the wait goes on; a proven one from this job that is
//     misconfigured (another world size, a rank connected twice) fails setup on both ends at
//     once, since waiting cannot fix it.
//  5. Connect to every higher rank, in increasing order: read its address from the store, connect
//     with exponential backoff and jitter while it is refused or unreachable, and handshake.
// Deadlock-free without a helper thread: rank r accepts before it connects, and a connector only
// needs its higher peer to be accepting, which that peer is from step 4 until every lower rank,
// the connector included, has reached it. By induction from rank 0 (nothing to accept) every rank
// gets through step 4. Everything is bounded by one deadline, connect_timeout.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_MESH_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_MESH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/transport/tcp/tcp_socket.h"

namespace paddle {

class Store;

struct TcpMeshOptions {
  int rank = -1;
  int world_size = 0;
  Store* store = nullptr;
  std::string store_prefix;
  std::string interface_name;
  absl::Duration connect_timeout;
  int socket_buffer_bytes = 0;  // see Note [Socket buffers]
  std::string job_token;        // mixed into the transport secret when set (PADDLE_STORE_TOKEN)
};

struct TcpMeshLink {
  TcpSocket socket;     // invalid at the own rank
  std::string address;  // the peer's published "host:port"
};

// Returns one link per rank (links[options.rank] has no socket and this rank's own address), each
// socket non-blocking with TCP_NODELAY set. Errors name this rank, the peer rank and its address,
// and what to change.
absl::StatusOr<std::vector<TcpMeshLink>> ConnectFullMesh(const TcpMeshOptions& options);

// The handshake's key and proofs (Note [Transport secret] in tcp_mesh.cc), public so that tests
// can play a peer that knows the secret.
struct TransportKey {
  std::string key;      // the HMAC key: the store's secret, mixed with the job token if any
  uint64_t job_id = 0;  // a hash of the key, sent in every Hello to tell jobs apart
};
TransportKey DeriveTransportKey(absl::string_view secret, absl::string_view job_token);
// HMAC-SHA256 over both Hellos (tcp_wire::kHelloBytes each), labelled by the side that sends it.
std::string HandshakeProof(absl::string_view key, bool from_acceptor, const char* hello_c,
                           const char* hello_a);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TCP_TCP_MESH_H_
