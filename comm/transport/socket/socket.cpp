// Socket plumbing: POSIX sockets, poll() for deadlines, getifaddrs() and a routing probe for
// the interface choice, abstract-namespace unix sockets for peers on the same host.
#include "comm/transport/socket/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ringgrad::comm::net {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

// Waits until one of `fds` has its events (revents says which); false when the deadline passed
// first.
bool poll_until(pollfd* fds, size_t count, Clock::time_point deadline) {
  for (;;) {
    int rc = ::poll(fds, static_cast<nfds_t>(count), remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) RG_THROW(IoError, "poll failed: ", errno_text(errno));
  }
}

bool poll_until(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  return poll_until(&p, 1, deadline);
}

struct InterfaceAddress {
  std::string name;
  std::string address;
  bool up = false;
  bool loopback = false;
};

std::vector<InterfaceAddress> list_ipv4_interfaces() {
  ifaddrs* head = nullptr;
  if (::getifaddrs(&head) != 0) RG_THROW(IoError, "getifaddrs failed: ", errno_text(errno));
  std::vector<InterfaceAddress> out;
  for (ifaddrs* it = head; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    ::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text);
    out.push_back(
        {it->ifa_name, text, (it->ifa_flags & IFF_UP) != 0, (it->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(head);
  return out;
}

// The local IPv4 address the kernel's routing table uses towards `host`: a UDP socket's
// connect() only picks a route and a source address, it sends nothing.
std::string source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0)
    RG_THROW(IoError, "choosing the ring interface: cannot resolve the store host '", host,
             "': ", ::gai_strerror(rc), " (set RINGGRAD_SOCKET_IFNAME to choose one)");
  Socket probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const int rc = probe.valid() ? ::connect(probe.fd(), found->ai_addr, found->ai_addrlen) : -1;
  const int err = errno;
  ::freeaddrinfo(found);
  if (rc != 0)
    RG_THROW(IoError, "choosing the ring interface: no route to the store host '", host,
             "': ", errno_text(err),
             " (set RINGGRAD_SOCKET_IFNAME; available: ", describe_interfaces(), ")");
  sockaddr_in local{};
  socklen_t len = sizeof local;
  ::getsockname(probe.fd(), reinterpret_cast<sockaddr*>(&local), &len);
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

sockaddr_in to_sockaddr(const std::string& host, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    RG_THROW(InvalidArgument, "'", host, "' is not an IPv4 address");
  return sa;
}

}  // namespace

bool Socket::is_unix() const {
  int domain = 0;
  socklen_t len = sizeof domain;
  return ::getsockopt(fd(), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

void Socket::abort() {
  if (!valid()) return;
  linger l{1, 0};
  ::setsockopt(fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close();
}

std::string describe_interfaces() {
  std::string out;
  for (const auto& a : list_ipv4_interfaces())
    out += (out.empty() ? "" : ", ") + a.name + " (" + a.address + (a.up ? "" : ", down") + ")";
  return out.empty() ? "none" : out;
}

LocalInterface select_interface(const std::optional<std::string>& ifname_setting,
                                const std::string& store_host) {
  const auto all = list_ipv4_interfaces();
  if (ifname_setting) {
    std::stringstream names(*ifname_setting);
    for (std::string name; std::getline(names, name, ',');)
      for (const auto& a : all)
        if (a.name == name && a.up)
          return {a.name, a.address, "RINGGRAD_SOCKET_IFNAME=" + *ifname_setting};
    RG_THROW(InvalidArgument, "RINGGRAD_SOCKET_IFNAME='", *ifname_setting,
             "' matches no up IPv4 interface; available: ", describe_interfaces());
  }
  if (store_host.empty()) return {"lo", "127.0.0.1", "in-process store, so one host: loopback"};
  const std::string address = source_address_towards(store_host);
  for (const auto& a : all)
    if (a.address == address) return {a.name, a.address, "route to the store host " + store_host};
  return {"?", address, "route to the store host " + store_host + " (no interface lists it)"};
}

Socket listen_on(const std::string& address, int& port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) RG_THROW(IoError, "socket() failed: ", errno_text(errno));
  sockaddr_in sa = to_sockaddr(address, 0);
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    RG_THROW(IoError, "bind to ", address, " failed: ", errno_text(errno));
  if (::listen(s.fd(), 128) != 0) RG_THROW(IoError, "listen failed: ", errno_text(errno));
  socklen_t len = sizeof sa;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  port = ntohs(sa.sin_port);
  return s;
}

Socket accept_until(const std::vector<const Socket*>& listeners, Clock::time_point deadline,
                    const std::string& what) {
  std::vector<pollfd> fds;
  for (const Socket* l : listeners)
    if (l->valid()) fds.push_back({l->fd(), POLLIN, 0});
  if (!poll_until(fds.data(), fds.size(), deadline))
    RG_THROW(TimeoutError, what, ": no connection arrived before the timeout");
  const auto ready =
      std::find_if(fds.begin(), fds.end(), [](const pollfd& p) { return p.revents != 0; });
  Socket s(::accept4(ready->fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!s.valid()) RG_THROW(IoError, what, ": accept failed: ", errno_text(errno));
  return s;
}

Socket connect_until(const Endpoint& to, Clock::time_point deadline, const std::string& what) {
  sockaddr_in sa = to_sockaddr(to.host, to.port);
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return s;
    int err = errno;
    if ((err != ECONNREFUSED && err != EINTR) || Clock::now() >= deadline)
      RG_THROW(IoError, what, ": connect to ", to.str(), " failed: ", errno_text(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Socket listen_unix(std::string& name) {
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) RG_THROW(IoError, "unix socket() failed: ", errno_text(errno));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  // An address of just the family asks the kernel for a fresh abstract name (autobind).
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa_family_t)) != 0)
    RG_THROW(IoError, "unix socket autobind failed: ", errno_text(errno));
  if (::listen(s.fd(), 128) != 0) RG_THROW(IoError, "unix listen failed: ", errno_text(errno));
  socklen_t len = sizeof sa;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  const size_t path_bytes = len - offsetof(sockaddr_un, sun_path);
  name.assign(sa.sun_path + 1, path_bytes - 1);  // skip the abstract namespace's leading NUL
  return s;
}

Socket connect_unix(const std::string& name, const std::string& what) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  RG_CHECK(name.size() + 1 < sizeof sa.sun_path, what, ": unix socket name too long");
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  // Non-blocking: a unix connect completes at once or, with the listener's backlog full, fails
  // with EAGAIN instead of waiting without a deadline.
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), len) != 0)
    RG_THROW(IoError, what, ": connect to unix socket @", name, " failed: ", errno_text(errno));
  return s;
}

std::string host_identity() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char netns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  if (boot_id.empty() || n <= 0) return {};
  return boot_id + "/" + std::string(netns, static_cast<size_t>(n));
}

void tune_stream(const Socket& s, int buffer_bytes) {
  // A failure here is rare (a descriptor that is not a socket, or one closed under us), but one
  // ignored would leave a blocking socket that hangs the progress engine past every deadline.
  auto check = [&](int rc, const char* what) {
    if (rc != 0)
      RG_THROW(IoError, "cannot set ", what, " on socket ", s.fd(), ": ", errno_text(errno));
  };
  int one = 1;
  if (!s.is_unix())
    check(::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), "TCP_NODELAY");
  check(::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes),
        "SO_SNDBUF");
  check(::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes),
        "SO_RCVBUF");
  const int flags = ::fcntl(s.fd(), F_GETFL, 0);
  check(flags < 0 ? -1 : ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK), "O_NONBLOCK");
}

void write_fully(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline,
                 const std::string& what) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(s.fd(), p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!poll_until(s.fd(), POLLOUT, deadline)) RG_THROW(TimeoutError, what, ": send timed out");
    } else {
      RG_THROW(IoError, what, ": send failed: ", errno_text(errno));
    }
  }
}

void read_fully(const Socket& s, void* data, size_t bytes, Clock::time_point deadline,
                const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(s.fd(), p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0) {
      RG_THROW(IoError, what, ": the peer closed the connection");
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!poll_until(s.fd(), POLLIN, deadline))
        RG_THROW(TimeoutError, what, ": receive timed out");
    } else {
      RG_THROW(IoError, what, ": receive failed: ", errno_text(errno));
    }
  }
}

void write_with_fds(const Socket& s, const void* data, size_t bytes, const std::vector<int>& fds,
                    Clock::time_point deadline, const std::string& what) {
  RG_CHECK(bytes > 0 && !fds.empty() && fds.size() <= 8, what, ": bad descriptor message");
  alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))] = {};
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  for (;;) {  // the descriptors travel with the first byte; the rest, if any, as plain bytes
    const ssize_t n = ::sendmsg(s.fd(), &msg, MSG_NOSIGNAL);
    if (n > 0)
      return write_fully(s, static_cast<const char*>(data) + n, bytes - static_cast<size_t>(n),
                         deadline, what);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      RG_THROW(IoError, what, ": send failed: ", errno_text(errno));
    if (!poll_until(s.fd(), POLLOUT, deadline)) RG_THROW(TimeoutError, what, ": send timed out");
  }
}

std::vector<UniqueFd> read_with_fds(const Socket& s, void* data, size_t bytes, size_t max_fds,
                                    Clock::time_point deadline, const std::string& what) {
  std::vector<UniqueFd> fds;  // owned from the moment they arrive, so a throw closes them
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))] = {};
    iovec iov{p, bytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(s.fd(), &msg, MSG_CMSG_CLOEXEC);
    if (n == 0) RG_THROW(IoError, what, ": the peer closed the connection");
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR)
        RG_THROW(IoError, what, ": receive failed: ", errno_text(errno));
      if (!poll_until(s.fd(), POLLIN, deadline))
        RG_THROW(TimeoutError, what, ": receive timed out");
      continue;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.emplace_back(fd);
        }
      }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  if (fds.size() > max_fds)
    RG_THROW(IoError, what, ": the peer passed ", fds.size(), " descriptors, expected at most ",
             max_fds);
  return fds;
}

}  // namespace ringgrad::comm::net
