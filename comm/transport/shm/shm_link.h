// ShmLink: a Link to a peer on this host through shared memory: the payload moves through the
// pair's ShmChannel (rings in the two ranks' inboxes, shm_channel.h); the unix socket the pair
// was set up over carries nothing more and stays open only so that its closing tells this rank
// the peer is gone. Sleeping waits on the mesh's doorbell (Note [shm doorbell], shm_mesh.h).
#pragma once
#include "comm/transport/link.h"
#include "comm/transport/shm/shm_channel.h"
#include "comm/transport/socket/socket.h"

namespace ringgrad::comm::shm {

class ShmLink : public Link {
 public:
  // `channel` and `doorbell` (the mesh's) outlive the link.
  ShmLink(net::Socket socket, ShmChannel& channel, Doorbell& doorbell);

  LinkKind kind() const override { return LinkKind::shm; }
  void post_send(const void* data, size_t bytes) override { channel_.post_send(data, bytes); }
  void post_recv(void* data, size_t bytes) override { channel_.post_recv(data, bytes); }
  bool post_recv_reduce(const Reduction& into, size_t bytes) override;
  bool progress() override { return channel_.progress(); }
  bool sending() const override { return channel_.sending(); }
  bool receiving() const override { return channel_.receiving(); }
  uint64_t recvs_done() const override { return channel_.recvs_done(); }
  int poll_fd() const override { return socket_.fd(); }
  short poll_events() const override;
  void after_poll_event() override;
  Doorbell* doorbell() const override { return &doorbell_; }
  bool pass_is_cheap() const override { return true; }  // loads and stores, no system call
  void abort() override;

 private:
  net::Socket socket_;
  ShmChannel& channel_;
  Doorbell& doorbell_;
};

}  // namespace ringgrad::comm::shm
