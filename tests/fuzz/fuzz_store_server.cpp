// libFuzzer target: a live TcpStoreServer (one per process: token "fuzz", small caps) fed one
// stranger's bytes per input, in the inputs of fuzz_store_frames.cpp (first byte: bit 0 set
// for PyTorch's protocol, sent to the workers' port; else ringgrad's frames to the main port).
// The client then stops writing and reads what comes back until the server closes the
// connection, which it must do within 10 s; every 1000 inputs a well-behaved client of its own
// checks that the server still serves. A crash, a sanitizer report (on the server's thread
// too), a hang or a server that stops serving is a finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"

namespace {

using namespace ringgrad::comm;

constexpr const char* kToken = "fuzz";

void require(bool rule) {
  if (!rule) std::abort();  // libFuzzer reports the input
}

struct Server {
  Server() {
    TcpStoreServerOptions o;
    o.token = kToken;
    o.max_frame_bytes = 1 << 16;
    o.max_bytes = 1 << 20;
    o.max_keys = 1000;
    server = std::make_unique<TcpStoreServer>(o);
    workers_port = server->open_worker_listener(0);
    TcpStoreOptions c;
    c.port = server->port();
    c.token = kToken;
    own = std::make_unique<TcpStore>(c);
    own->set("fuzz/alive", alive(0));  // before the inputs can fill the store
  }
  // Always 20 characters: replacing the value never needs room the inputs may have taken.
  static std::string alive(uint64_t n) {
    const std::string digits = std::to_string(n);
    return std::string(20 - digits.size(), '0') + digits;
  }
  std::unique_ptr<TcpStoreServer> server;
  int workers_port = 0;
  std::unique_ptr<TcpStore> own;
  uint64_t inputs = 0;
};

// libFuzzer's timeout alarm (SIGALRM, -timeout) interrupts blocking calls now and then: each
// call below carries on after EINTR (a connect so interrupted starts over on a fresh socket).
int connect_to(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    require(fd >= 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    require(errno == EINTR);
    ::close(fd);
  }
}

void send_to(int port, std::string_view bytes) {
  const int fd = connect_to(port);
  timeval guard{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  for (size_t sent = 0; sent < bytes.size();) {  // the server may close early: that ends it
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char reply[4096];
  ssize_t n;
  while ((n = ::recv(fd, reply, sizeof reply, 0)) > 0 || (n < 0 && errno == EINTR)) {
  }
  // Closed, or still open after 1 s: a request the server parked (a wait for a key, with the
  // input's own timeout) keeps its connection until then, and the server reads nothing more
  // from it meanwhile. That the server itself still answers is checked every 1000 inputs below.
  require(n == 0 || errno == ECONNRESET || errno == EAGAIN || errno == EWOULDBLOCK);
  linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static Server s;
  if (size == 0) return 0;
  const bool torch = bytes[0] & 1;
  send_to(torch ? s.workers_port : s.server->port(),
          std::string_view(reinterpret_cast<const char*>(bytes) + 1, size - 1));
  if (++s.inputs % 1000 == 0) {
    s.own->set("fuzz/alive", Server::alive(s.inputs));
    require(s.own->get("fuzz/alive") == Server::alive(s.inputs));
  }
  return 0;
}
