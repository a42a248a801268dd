// Test helpers for the store suites: a running TcpStoreServer with clients on it, a raw socket
// for hand-made bytes, and a check that an exception's message contains given fragments.
#pragma once
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "tests/message_of.h"

namespace ringgrad::comm::testing {

inline std::unique_ptr<TcpStore> connect_to(const TcpStoreServer& server,
                                            const std::string& token = "",
                                            int64_t generation = -1) {
  TcpStoreOptions o;
  o.port = server.port();
  o.token = token;
  o.generation = generation;
  o.connect_timeout = Milliseconds(5000);
  return std::make_unique<TcpStore>(o);
}

// A raw loopback socket that writes whatever bytes it is given.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval tv{5, 0};  // bounds closed_by_server()
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  // Closed with a reset: 100,000 connections must not leave 100,000 ports in TIME_WAIT.
  ~RawClient() {
    linger reset{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // False once the server has closed the connection (or its buffer is full).
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until EOF, discarding replies; true if the server closed within the 5 s timeout.
  bool closed_by_server() {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  void finish_writing() { ::shutdown(fd_, SHUT_WR); }
  // Exactly n bytes of reply, or what came before the server closed (or 5 s passed).
  std::string receive(size_t n) {
    std::string out;
    char buf[4096];
    while (out.size() < n) {
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }

 private:
  int fd_;
};

// Polls `done` every 10 ms for at most 10 s (the server works on its own thread); its last answer.
inline bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

using ringgrad::testing::message_of;

}  // namespace ringgrad::comm::testing
