// SocketAddress: an IPv4 or IPv6 address and port, and the choice of the address a rank listens
// on and advertises to its peers.
//
// Ranks publish "host:port" text through the store (IPv6 hosts in brackets: "[::1]:4000"), so an
// address must round-trip through text exactly. Which local address to advertise is the most
// common misconfiguration of multi-host jobs (a rank advertising 127.0.0.1 to other hosts, or an
// interface the others cannot route to); Note [Choosing the listen address] in socket_address.cc
// lists the order of preference, and every error names the interfaces that do exist.
#ifndef PADDLE_COLLECTIVE_NET_SOCKET_ADDRESS_H_
#define PADDLE_COLLECTIVE_NET_SOCKET_ADDRESS_H_

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

class SocketAddress {
 public:
  SocketAddress() = default;
  SocketAddress(const sockaddr* addr, socklen_t size);

  // A numeric IPv4 or IPv6 address ("10.0.0.2", "::1", "fe80::1%eth0") and a port.
  static absl::StatusOr<SocketAddress> FromIp(absl::string_view ip, int port);
  // "host:port" or "[ipv6]:port", as ToString() writes it; the host must be numeric.
  static absl::StatusOr<SocketAddress> Parse(absl::string_view host_port);

  bool valid() const { return size_ != 0; }
  int family() const { return storage_.ss_family; }
  int port() const;
  void set_port(int port);
  bool IsLoopback() const;

  // The numeric host without brackets ("::1").
  std::string Host() const;
  // "10.0.0.2:4000", "[::1]:4000"
  std::string ToString() const;

  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const { return size_; }

 private:
  sockaddr_storage storage_{};
  socklen_t size_ = 0;
};

// The address to listen on and advertise: `interface_name` (a network interface such as "eth0",
// or an address literal of this host such as "10.0.0.2" or "::1"), else $PADDLE_SOCKET_IFNAME,
// else the address the host name resolves to if it is not a loopback address, else 127.0.0.1.
// The port is 0. See Note [Choosing the listen address].
absl::StatusOr<SocketAddress> SelectListenAddress(absl::string_view interface_name);

// The address of the network interface `name` (IPv4 preferred, then global IPv6, then link-local
// IPv6); kNotFound listing every interface and its addresses if there is none.
absl::StatusOr<SocketAddress> InterfaceAddress(absl::string_view name);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_NET_SOCKET_ADDRESS_H_
