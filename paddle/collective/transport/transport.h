// The transport: how the bytes of a collective move between ranks.
//
// A `Transport` connects one rank to every other rank of its group (addresses exchanged through
// the group's Store) and owns the I/O threads. A `Channel` is the link to one peer: ordered,
// reliable, message-based. Collective algorithms see only this narrow interface (post a send or
// receive, wait on it with a deadline), never sockets, shared memory or CUDA streams, so every
// algorithm runs unchanged over TCP, shared memory or UCX.
//
// Messages carry a 64-bit tag. A receive matches the oldest unmatched message with its tag from
// that peer; messages with one tag arrive in the order they were sent. Buffers are the caller's:
// a send reads from, and a receive writes into, the caller's memory, which must stay valid until
// the request completes (implementations avoid intermediate copies for large messages whenever
// the receive is posted before the data arrives).
//
// Failure: a peer that closes its link, a protocol error, or Abort() poisons the transport: every
// pending and later request fails with a status naming the peer rank and address and the cause.
// Wait() never blocks past its deadline; a deadline that passes leaves the request pending (the
// caller decides whether to Abort).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_TRANSPORT_H_
#define PADDLE_COLLECTIVE_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/core/deadline.h"

namespace paddle {

class Store;

// One posted send or receive.
class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
  // OK once the buffer may be reused (send) or holds the message (receive); the failure cause
  // otherwise; kDeadlineExceeded if `deadline` passes first (the request stays pending).
  virtual absl::Status Wait(const Deadline& deadline) = 0;
  virtual bool IsCompleted() const = 0;
};

// The link to one peer.
class Channel {
 public:
  virtual ~Channel() = default;
  virtual int peer() const = 0;
  virtual const std::string& peer_address() const = 0;
  // `data` must stay valid and unchanged until the request completes.
  virtual std::unique_ptr<TransportRequest> Send(const void* data, size_t bytes, uint64_t tag) = 0;
  // Receives the next message with `tag` into `data`; a message of another size fails the
  // request with an error naming both sizes, the tag and the peer.
  virtual std::unique_ptr<TransportRequest> Recv(void* data, size_t bytes, uint64_t tag) = 0;
  // Two Sends in this order; a transport may hand both to the wire at once. The agreement stamp
  // rides this way in front of an operation's first message to a peer (Note [Agreement check]),
  // so over TCP it costs no system call or segment of its own.
  virtual void SendPair(const void* first, size_t first_bytes, uint64_t first_tag,
                        const void* second, size_t second_bytes, uint64_t second_tag,
                        std::unique_ptr<TransportRequest>* first_request,
                        std::unique_ptr<TransportRequest>* second_request) {
    *first_request = Send(first, first_bytes, first_tag);
    *second_request = Send(second, second_bytes, second_tag);
  }
};

struct TransportOptions {
  int rank = -1;
  int world_size = 0;
  // Where ranks publish and read addresses; keys go under `store_prefix`.
  std::shared_ptr<Store> store;
  std::string store_prefix = "transport";
  // Time to establish all links (address exchange, connect retries, handshakes).
  absl::Duration connect_timeout = DefaultTimeout(TimeoutKind::kConnect);
  // Network interface to listen on and advertise (PADDLE_SOCKET_IFNAME when empty); "" and no
  // variable: the address of the host name, else loopback. An address literal of this host
  // ("10.0.0.2", "::1") is accepted too, to pick one address family or one of several addresses.
  std::string interface_name;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "tcp", "shm", "ucx"
  virtual std::string name() const = 0;
  // The link to `peer` (0 <= peer < world_size, peer != rank).
  virtual Channel& channel(int peer) = 0;
  // Fails every pending and later request with `cause`, closes all links and wakes every waiter.
  // Safe from any thread, any number of times (the first cause wins).
  virtual void Abort(const absl::Status& cause) = 0;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_TRANSPORT_H_
