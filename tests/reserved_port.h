// A TCP port for a test to hand to a store: bound (SO_REUSEADDR), never listening, and held
// until the test process exits. Connects to it are refused and no other program's port-0 bind
// can take it, yet a store, which also sets SO_REUSEADDR, can still listen on it. A port that
// is picked and then released can be taken before the store binds it (it was, in CI).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "core/error.h"

namespace ringgrad::testing {

class PortReservation {
 public:
  PortReservation() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    RG_CHECK(fd_ >= 0, "socket: ", std::strerror(errno));
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof addr;
    RG_CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                 ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0,
             "cannot reserve a free TCP port: ", std::strerror(errno));
    port_ = ntohs(addr.sin_port);
  }
  ~PortReservation() { ::close(fd_); }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

inline int reserved_port() {
  static std::deque<PortReservation> held;
  return held.emplace_back().port();
}

}  // namespace ringgrad::testing
