// One SOCK_DIAG_BY_FAMILY request without NLM_F_DUMP: the kernel looks up the one socket with
// the given 4-tuple and answers with its inet_diag_msg (or an error when there is none). Asked
// for an IPv4 socket, then for an IPv6 one whose addresses are IPv4-mapped (::ffff:a.b.c.d).
#include "comm/store/socket_owner.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/unique_fd.h"

namespace ringgrad::comm {

namespace {

std::optional<uid_t> ask_kernel(int family, const in_addr& client, int client_port,
                                const in_addr& server, int server_port) {
  const UniqueFd netlink(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!netlink.valid()) return std::nullopt;
  const int fd = netlink.get();
  timeval guard{1, 0};  // the kernel answers at once; this only bounds a broken netlink
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } query{};
  query.header.nlmsg_len = sizeof query;
  query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  query.header.nlmsg_flags = NLM_F_REQUEST;
  query.request.sdiag_family = static_cast<uint8_t>(family);
  query.request.sdiag_protocol = IPPROTO_TCP;
  query.request.idiag_states = ~0u;
  inet_diag_sockid& id = query.request.id;
  id.idiag_sport = htons(static_cast<uint16_t>(client_port));
  id.idiag_dport = htons(static_cast<uint16_t>(server_port));
  const int last = family == AF_INET ? 0 : 3;  // IPv4-mapped: ::ffff in word 2, then IPv4
  if (family == AF_INET6) id.idiag_src[2] = id.idiag_dst[2] = htonl(0xffff);
  id.idiag_src[last] = client.s_addr;
  id.idiag_dst[last] = server.s_addr;
  id.idiag_cookie[0] = id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uid_t> owner;
  alignas(nlmsghdr) char reply[8192];
  if (::sendto(fd, &query, sizeof query, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      sizeof query) {
    const ssize_t n = ::recv(fd, reply, sizeof reply, 0);
    const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
    if (n >= static_cast<ssize_t>(NLMSG_LENGTH(sizeof(inet_diag_msg))) &&
        header->nlmsg_type == SOCK_DIAG_BY_FAMILY)
      owner = static_cast<const inet_diag_msg*>(NLMSG_DATA(header))->idiag_uid;
  }
  return owner;
}

}  // namespace

std::optional<uid_t> loopback_socket_owner(const std::string& client_ip, int client_port,
                                           const std::string& server_ip, int server_port) {
  in_addr client{}, server{};
  if (::inet_pton(AF_INET, client_ip.c_str(), &client) != 1 ||
      ::inet_pton(AF_INET, server_ip.c_str(), &server) != 1)
    return std::nullopt;
  for (int family : {AF_INET, AF_INET6})
    if (auto uid = ask_kernel(family, client, client_port, server, server_port)) return uid;
  return std::nullopt;
}

}  // namespace ringgrad::comm
