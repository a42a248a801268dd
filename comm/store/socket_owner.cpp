// /proc/net/tcp and /proc/net/tcp6 list one socket per line: "sl: LOCAL REMOTE st tx:rx tr:when
// retrnsmt uid ...", each address in hex as the kernel holds it in memory (32-bit words in
// network byte order, each read as a native integer) and the port in hex. A client on a
// dual-stack IPv6 socket (PyTorch's) reaching an IPv4 server is listed in tcp6, its addresses
// IPv4-mapped (::ffff:a.b.c.d).
#include "comm/store/socket_owner.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace ringgrad::comm {

namespace {

std::optional<uint32_t> raw_ipv4(const std::string& ip) {
  in_addr a{};
  if (::inet_pton(AF_INET, ip.c_str(), &a) != 1) return std::nullopt;
  return a.s_addr;
}

uint32_t hex_word(const std::string& text, size_t at) {
  return static_cast<uint32_t>(std::strtoul(text.substr(at, 8).c_str(), nullptr, 16));
}

// "0100007F:9C40" or an IPv4-mapped "0000000000000000FFFF00000100007F:9C40": the raw IPv4
// address and the port; nothing for other IPv6 addresses or malformed text.
std::optional<std::pair<uint32_t, unsigned>> listed_endpoint(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string address = text.substr(0, colon);
  const auto port = static_cast<unsigned>(std::strtoul(text.c_str() + colon + 1, nullptr, 16));
  if (address.size() == 8) return std::make_pair(hex_word(address, 0), port);
  if (address.size() == 32 && hex_word(address, 0) == 0 && hex_word(address, 8) == 0 &&
      hex_word(address, 16) == htonl(0x0000ffff))
    return std::make_pair(hex_word(address, 24), port);
  return std::nullopt;
}

}  // namespace

std::optional<uid_t> socket_owner_in_table(const std::string& table, const std::string& client_ip,
                                           int client_port, const std::string& server_ip,
                                           int server_port) {
  const auto client = raw_ipv4(client_ip), server = raw_ipv4(server_ip);
  if (!client || !server) return std::nullopt;
  const auto want_client = std::make_pair(*client, static_cast<unsigned>(client_port));
  const auto want_server = std::make_pair(*server, static_cast<unsigned>(server_port));
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w && f.size() < 8;) f.push_back(w);
    if (f.size() < 8) continue;
    if (listed_endpoint(f[1]) == want_client && listed_endpoint(f[2]) == want_server)
      return static_cast<uid_t>(std::strtoul(f[7].c_str(), nullptr, 10));
  }
  return std::nullopt;
}

std::optional<uid_t> loopback_socket_owner(const std::string& client_ip, int client_port,
                                           const std::string& server_ip, int server_port) {
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream table;
    table << in.rdbuf();
    if (auto uid =
            socket_owner_in_table(table.str(), client_ip, client_port, server_ip, server_port))
      return uid;
  }
  return std::nullopt;
}

}  // namespace ringgrad::comm
