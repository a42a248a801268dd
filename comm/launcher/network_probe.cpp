// Network probes: address resolution and a bind test for "is this address ours".
#include "comm/launcher/network_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/unique_fd.h"

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
           const UniqueFd fd(::socket(a->ai_family, SOCK_DGRAM, 0));
           return fd.valid() && ::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0;
         });
}

bool resolves_to(const std::string& host, const std::string& ipv4) {
  in_addr want{};
  if (::inet_pton(AF_INET, ipv4.c_str(), &want) != 1) return false;
  return any_address(host, [&](addrinfo* a) {
    return a->ai_family == AF_INET &&
           reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr == want.s_addr;
  });
}

}  // namespace ringgrad::comm
