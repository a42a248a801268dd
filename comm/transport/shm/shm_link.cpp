// ShmLink: the channel behind the Link contract, and the socket as the peer's sign of life.
#include "comm/transport/shm/shm_link.h"

#include <poll.h>

#include "core/error.h"

namespace ringgrad::comm::shm {

ShmLink::ShmLink(net::Socket socket, ShmChannel& channel, Doorbell& doorbell)
    : socket_(std::move(socket)), channel_(channel), doorbell_(doorbell) {}

bool ShmLink::post_recv_reduce(const Reduction& into, size_t bytes) {
  channel_.post_recv_reduce(into, bytes);
  return true;
}

// Nothing flows on the socket after set-up, so readable means closed (or reset by an abort).
short ShmLink::poll_events() const { return POLLIN; }

void ShmLink::after_poll_event() {
  progress();  // what the peer left in the ring before it went still counts
  if (pending()) RG_THROW(IoError, "its socket closed, so the process is gone or aborted");
}

void ShmLink::abort() {
  socket_.abort();
  channel_.abort();
}

}  // namespace ringgrad::comm::shm
