// SocketAddress parsing and formatting, and the choice of the listen address.
#include "paddle/collective/net/socket_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {

SocketAddress::SocketAddress(const sockaddr* addr, socklen_t size) {
  if (size > sizeof(storage_)) size = sizeof(storage_);
  std::memcpy(&storage_, addr, size);
  size_ = size;
}

absl::StatusOr<SocketAddress> SocketAddress::FromIp(absl::string_view ip, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, " is out of range [0, 65535]"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* info = nullptr;
  std::string host(ip);
  std::string service = absl::StrCat(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &info);
  if (rc != 0 || info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", ip, "' is not a numeric IPv4 or IPv6 address: ", gai_strerror(rc)));
  }
  SocketAddress address(info->ai_addr, info->ai_addrlen);
  freeaddrinfo(info);
  return address;
}

absl::StatusOr<SocketAddress> SocketAddress::Parse(absl::string_view host_port) {
  absl::string_view host;
  absl::string_view port_text;
  if (!host_port.empty() && host_port.front() == '[') {
    size_t close = host_port.find("]:");
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", host_port, "' has no ']:port' after its IPv6 host"));
    }
    host = host_port.substr(1, close - 1);
    port_text = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", host_port, "' is not of the form host:port"));
    }
    host = host_port.substr(0, colon);
    port_text = host_port.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address '", host_port, "': an IPv6 host must be written in brackets, [host]:port"));
    }
  }
  int port = -1;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", host_port, "' has a bad port '", port_text, "'"));
  }
  return FromIp(host, port);
}

int SocketAddress::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::set_port(int port) {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(static_cast<uint16_t>(port));
  } else if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

bool SocketAddress::IsLoopback() const {
  if (family() == AF_INET) {
    uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&ip)) return true;
    return IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127;
  }
  return false;
}

std::string SocketAddress::Host() const {
  if (!valid()) return "(none)";
  char host[NI_MAXHOST];
  int rc = getnameinfo(addr(), size_, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  if (rc != 0) return absl::StrCat("(unprintable address: ", gai_strerror(rc), ")");
  return host;
}

std::string SocketAddress::ToString() const {
  if (family() == AF_INET6) return absl::StrCat("[", Host(), "]:", port());
  return absl::StrCat(Host(), ":", port());
}

namespace {

// Preference among one interface's addresses: lower is better.
int AddressPreference(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return 0;
  const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
  return IN6_IS_ADDR_LINKLOCAL(&ip) ? 2 : 1;
}

// Whether a socket can be bound to `address` here, i.e. it is an address of this host.
bool CanBind(const SocketAddress& address) {
  int fd = socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = bind(fd, address.addr(), address.size()) == 0;
  close(fd);
  return ok;
}

// Note [Choosing the listen address]. The address the other ranks will connect to, in order:
//  1. TransportOptions.interface_name, then 2. $PADDLE_SOCKET_IFNAME: an interface name ("eth0",
//     via getifaddrs) or an address literal of this host ("10.0.0.2", "::1"). A name that does
//     not exist is an error listing the interfaces that do, never a silent fallback: the user
//     asked for it.
//  3. The first address the host name resolves to that is not loopback and can be bound here:
//     what a multi-host job usually wants. A loopback one (Debian maps the host name to
//     127.0.1.1) would be unreachable from other hosts, so it is skipped.
//  4. 127.0.0.1: a single-host job.
absl::StatusOr<SocketAddress> AddressFromSetting(absl::string_view setting,
                                                 absl::string_view source) {
  absl::StatusOr<SocketAddress> literal = SocketAddress::FromIp(setting, 0);
  if (literal.ok()) {
    if (!CanBind(*literal)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, "='", setting,
                       "' is not an address of this host (bind failed); set it to one of this "
                       "host's interfaces or addresses"));
    }
    return literal;
  }
  absl::StatusOr<SocketAddress> address = InterfaceAddress(setting);
  if (!address.ok()) {
    return absl::Status(address.status().code(),
                        absl::StrCat(source, ": ", address.status().message()));
  }
  return address;
}

}  // namespace

absl::StatusOr<SocketAddress> InterfaceAddress(absl::string_view name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(absl::StrCat("getifaddrs failed: ", std::strerror(errno)));
  }
  SocketAddress best;
  int best_preference = 3;
  std::map<std::string, std::vector<std::string>> available;  // for the error message
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t size = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    SocketAddress address(ifa->ifa_addr, size);
    available[ifa->ifa_name].push_back(address.Host());
    if (name != ifa->ifa_name) continue;
    int preference = AddressPreference(ifa->ifa_addr);
    if (preference < best_preference) {
      best = address;
      best_preference = preference;
    }
  }
  freeifaddrs(list);
  if (best.valid()) {
    best.set_port(0);
    return best;
  }
  std::vector<std::string> described;
  for (const auto& [interface, addresses] : available) {
    described.push_back(absl::StrCat(interface, " (", absl::StrJoin(addresses, ", "), ")"));
  }
  return absl::NotFoundError(
      absl::StrCat("network interface '", name,
                   "' does not exist or has no IP address; this host "
                   "has: ",
                   described.empty() ? "none" : absl::StrJoin(described, ", ")));
}

absl::StatusOr<SocketAddress> SelectListenAddress(absl::string_view interface_name) {
  if (!interface_name.empty()) {
    return AddressFromSetting(interface_name, "TransportOptions.interface_name");
  }
  if (std::optional<std::string> env = StringSetting("PADDLE_SOCKET_IFNAME"); env.has_value()) {
    return AddressFromSetting(*env, "PADDLE_SOCKET_IFNAME");
  }

  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* info = nullptr;
    if (getaddrinfo(host, nullptr, &hints, &info) == 0) {
      SocketAddress chosen;
      for (addrinfo* ai = info; ai != nullptr; ai = ai->ai_next) {
        SocketAddress candidate(ai->ai_addr, ai->ai_addrlen);
        if (candidate.IsLoopback() || !CanBind(candidate)) continue;
        chosen = candidate;
        break;
      }
      freeaddrinfo(info);
      if (chosen.valid()) {
        chosen.set_port(0);
        PADDLE_LOG(DEBUG, NET) << "listening on " << chosen.Host() << ", the address of host name '"
                               << host << "' (set PADDLE_SOCKET_IFNAME to choose another)";
        return chosen;
      }
    }
  }
  PADDLE_LOG(DEBUG, NET) << "host name '" << host
                         << "' has no non-loopback address: listening on 127.0.0.1, reachable "
                            "from this host only (set PADDLE_SOCKET_IFNAME for multi-host jobs)";
  return SocketAddress::FromIp("127.0.0.1", 0);
}

}  // namespace paddle
