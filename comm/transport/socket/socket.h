// Socket plumbing for the TCP transport: an RAII file descriptor, listen/connect with
// deadlines, stream tuning (TCP_NODELAY, large buffers, non-blocking), the choice of the
// local interface address (RINGGRAD_SOCKET_IFNAME, like NCCL_SOCKET_IFNAME), and the unix
// sockets that connect ranks on the same host.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/transport/transport.h"
#include "core/unique_fd.h"

namespace ringgrad::comm::net {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  bool is_unix() const;  // an AF_UNIX socket (else TCP)
  void close() { fd_.reset(); }
  // Closes with a reset (SO_LINGER 0), so the peer sees ECONNRESET at once.
  void abort();

 private:
  UniqueFd fd_;
};

struct Endpoint {
  std::string host;
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
  bool is_loopback() const { return host.rfind("127.", 0) == 0; }  // 127.0.0.0/8
};

// The interface this rank talks on, and why (for the per-rank log line and errors).
// With RINGGRAD_SOCKET_IFNAME (one name or a comma list, first match wins): that interface's
// IPv4 address; an unknown name throws InvalidArgument listing every interface and address.
// Otherwise the address the kernel's routing picks to reach `store_host` (the store's host,
// which every rank reaches, so peers reach this rank the same way; a master on 127.0.0.1 means
// loopback and nothing else). No store host known (an in-process store): loopback.
struct LocalInterface {
  std::string name;     // "lo", "eth0"
  std::string address;  // "127.0.0.1"
  std::string reason;   // "RINGGRAD_SOCKET_IFNAME=lo", "route to the store host 127.0.0.1"
};
LocalInterface select_interface(const std::optional<std::string>& ifname_setting,
                                const std::string& store_host);
// "lo (127.0.0.1), eth0 (10.0.0.5)": every IPv4 interface, for error messages.
std::string describe_interfaces();

// Listening socket on `address`, kernel-chosen port; returns the port through `port`.
Socket listen_on(const std::string& address, int& port);
// Accepts one connection on whichever of `listeners` (invalid ones are skipped) has one first,
// waiting until `deadline`; throws TimeoutError naming `what`.
Socket accept_until(const std::vector<const Socket*>& listeners, Clock::time_point deadline,
                    const std::string& what);
// Connects, retrying refused connections until `deadline`.
Socket connect_until(const Endpoint& to, Clock::time_point deadline, const std::string& what);

// Same-host connections: AF_UNIX stream sockets in the abstract namespace. They reach the
// processes of one kernel and one network namespace, which is the scope host_identity() names,
// and carry a byte stream faster than loopback TCP, with no TCP/IP processing per packet
// (docs/measurements.md).
// listen_unix binds a kernel-chosen name (autobind: unique, printable) and returns it in `name`.
Socket listen_unix(std::string& name);
Socket connect_unix(const std::string& name, const std::string& what);  // non-blocking
// "<boot id>/net:[<inode>]": equal on two ranks iff they share a kernel and a network
// namespace, so the one can reach the other's abstract unix socket. "" when unreadable.
std::string host_identity();

// TCP_NODELAY (TCP only), SO_SNDBUF/SO_RCVBUF of `buffer_bytes`, O_NONBLOCK.
void tune_stream(const Socket& s, int buffer_bytes);

// Blocking-with-deadline exchange on a (non-blocking) socket, for the connection handshake.
void write_fully(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline,
                 const std::string& what);
void read_fully(const Socket& s, void* data, size_t bytes, Clock::time_point deadline,
                const std::string& what);
// The same over a unix socket, with file descriptors passed along (SCM_RIGHTS): the receiver
// gets its own descriptors for the sender's open files (at most `max_fds`).
void write_with_fds(const Socket& s, const void* data, size_t bytes, const std::vector<int>& fds,
                    Clock::time_point deadline, const std::string& what);
std::vector<UniqueFd> read_with_fds(const Socket& s, void* data, size_t bytes, size_t max_fds,
                                    Clock::time_point deadline, const std::string& what);

}  // namespace ringgrad::comm::net
