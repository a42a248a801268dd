// Questions the launcher asks this host's network stack: is an address one of ours (so we
// should host the rendezvous store), and a free TCP port for the workers' MASTER_PORT that
// stays reserved until the workers bind it.
#pragma once
#include <string>

namespace ringgrad::comm {

bool is_loopback_host(const std::string& host);  // "localhost", 127.x, ::1
// True if `host` resolves to an address of an interface of this machine.
bool is_local_host(const std::string& host);

// Holds a port bound (SO_REUSEADDR, never listening) on all interfaces. The kernel will not
// hand the port to another port-0 bind while it is held, yet a worker's store, which also sets
// SO_REUSEADDR, can still bind and listen on it: this closes the pick-then-bind race.
class PortReservation {
 public:
  PortReservation();  // throws IoError when no port can be had
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ringgrad::comm
