// Which user opened a loopback TCP connection: the owner of the client's socket, read from this
// network namespace's /proc/net/tcp and tcp6 (the uid column of the line whose local address is
// the client's end and whose remote address is ours). The store uses it to admit PyTorch clients,
// whose protocol carries no token, only from the job's own user.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>

namespace ringgrad::comm {

// The uid owning the IPv4 socket `client_ip:client_port` connected to `server_ip:server_port`,
// or nothing when no such socket is listed.
std::optional<uid_t> loopback_socket_owner(const std::string& client_ip, int client_port,
                                           const std::string& server_ip, int server_port);

// The same, from the text of a /proc/net/tcp or tcp6 table (for tests).
std::optional<uid_t> socket_owner_in_table(const std::string& table, const std::string& client_ip,
                                           int client_port, const std::string& server_ip,
                                           int server_port);

}  // namespace ringgrad::comm
