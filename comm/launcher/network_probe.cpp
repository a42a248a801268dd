// Network probes: address resolution, a bind test for "is this address ours", and the port
// reservation.
#include "comm/launcher/network_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ringgrad::comm {

namespace {
template <class Fn>
bool any_address(const std::string& host, Fn fn) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return false;
  bool found = false;
  for (addrinfo* a = list; a && !found; a = a->ai_next) found = fn(a);
  ::freeaddrinfo(list);
  return found;
}
}  // namespace

bool is_loopback_host(const std::string& host) {
  return any_address(host, [](addrinfo* a) {
    if (a->ai_family == AF_INET)
      return (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    if (a->ai_family == AF_INET6)
      return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr) != 0;
    return false;
  });
}

bool is_local_host(const std::string& host) {
  // Binding to an address succeeds only if an interface of this host carries it.
  return is_loopback_host(host) || any_address(host, [](addrinfo* a) {
           const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
           if (fd < 0) return false;
           const bool ours = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
           ::close(fd);
           return ours;
         });
}

PortReservation::PortReservation() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  RG_CHECK(fd_ >= 0, "socket: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    ::close(fd_);
    RG_THROW(IoError, "cannot reserve a free TCP port for the workers: ", std::strerror(e));
  }
  port_ = ntohs(addr.sin_port);
}

PortReservation::~PortReservation() { ::close(fd_); }

}  // namespace ringgrad::comm
