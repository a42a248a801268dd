// Which user opened a loopback TCP connection: the owner of the client's socket, asked of the
// kernel by its addresses (sock_diag over netlink, the interface `ss` uses: one exact lookup,
// where reading /proc/net/tcp walks every socket's hash bucket, ~10 ms a time). The store uses
// it to admit PyTorch clients, whose protocol carries no token, only from the job's own user.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>

namespace ringgrad::comm {

// The uid owning the TCP socket `client_ip:client_port` connected to `server_ip:server_port`
// (IPv4 addresses; the client's socket may be IPv4 or a dual-stack IPv6 one, as PyTorch's is),
// or nothing when the kernel knows no such socket.
std::optional<uid_t> loopback_socket_owner(const std::string& client_ip, int client_port,
                                           const std::string& server_ip, int server_port);

}  // namespace ringgrad::comm
