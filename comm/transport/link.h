// Link: this rank's end of the byte stream with one peer, whatever carries it. MeshTransport
// (mesh_transport.h) holds one per peer and runs one progress loop over all of them; it knows
// no link kind. The kinds are siblings: net::SocketLink (a TCP or unix socket,
// socket/socket_link.h) and shm::ShmLink (shared-memory rings, shm/shm_link.h), chosen per
// peer when the mesh is set up.
//
// The contract, the same for every kind: sends complete in the order they were posted, and so
// do receives; a receive takes the next `bytes` of the stream, whatever sends they came in; the
// buffers stay valid until the receive is counted in recvs_done() or, for a send, until
// sending() is false. Nothing blocks: progress() moves what it can and returns.
// Single-threaded (the process group's worker thread).
#pragma once
#include <cstddef>
#include <cstdint>

#include "comm/transport/transport.h"

namespace ringgrad::comm {

enum class LinkKind { tcp, unix_socket, shm };
const char* link_name(LinkKind kind);  // "tcp", "unix", "shm"

// A wake-up that several links share (the shared-memory doorbell, Note [shm doorbell] in
// shm/shm_mesh.h): bytes put where the sleeper looks do not make its fd readable, so the peer
// rings this instead. The engine arms it, makes one last pass, and then polls fd() too.
class Doorbell {
 public:
  virtual int fd() const = 0;
  virtual void begin_sleep() = 0;  // before the last pass
  virtual void end_sleep() = 0;    // after poll() returned
 protected:
  ~Doorbell() = default;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual LinkKind kind() const = 0;

  // Queue `bytes` (to send, or to receive into `data`); the contract above.
  virtual void post_send(const void* data, size_t bytes) = 0;
  virtual void post_recv(void* data, size_t bytes) = 0;
  // A receive that folds what arrives into `into` (Transport::recv_reduce) where the bytes lie;
  // false when this kind cannot, and the caller receives into scratch and reduces.
  virtual bool post_recv_reduce(const Reduction& /*into*/, size_t /*bytes*/) { return false; }

  // One non-blocking pass both ways; true if any byte moved. Throws IoError saying what went
  // wrong ("end of stream", errno's text); the transport adds the peer and the operation.
  virtual bool progress() = 0;
  virtual bool sending() const = 0;    // sends queued
  virtual bool receiving() const = 0;  // receives queued
  bool pending() const { return sending() || receiving(); }
  virtual uint64_t recvs_done() const = 0;  // receives completed since the link was made

  // What to poll() for while the link has work queued, and what to do when poll() reports an
  // event there (the next pass moves the bytes; a link whose fd carries no payload fails).
  virtual int poll_fd() const = 0;
  virtual short poll_events() const = 0;
  virtual void after_poll_event() {}
  // The shared wake-up this link also needs watched while it waits, or null.
  virtual Doorbell* doorbell() const { return nullptr; }
  // Whether a pass makes no system call, so spinning on it is cheap (wait_policy.h).
  virtual bool pass_is_cheap() const = 0;

  // The group aborted: drop what is queued and make the peer fail at once.
  virtual void abort() = 0;
};

}  // namespace ringgrad::comm
