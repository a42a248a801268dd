// SocketLink: a Link over one stream socket (TCP, or a unix socket to a peer on this host: the
// same byte stream without the TCP/IP processing). Queued sends and receives leave and arrive
// with writev/readv, up to kMaxIov buffers a system call, so a fingerprint and its payload
// travel in one.
#pragma once
#include <deque>

#include "comm/transport/link.h"
#include "comm/transport/socket/socket.h"

namespace ringgrad::comm::net {

class SocketLink : public Link {
 public:
  struct Pending {
    char* data;  // the next byte to move
    size_t left;
  };

  explicit SocketLink(Socket socket);

  LinkKind kind() const override;
  void post_send(const void* data, size_t bytes) override;
  void post_recv(void* data, size_t bytes) override;
  bool progress() override;
  bool sending() const override { return !sends_.empty(); }
  bool receiving() const override { return !recvs_.empty(); }
  uint64_t recvs_done() const override { return recvs_done_; }
  int poll_fd() const override { return socket_.fd(); }
  short poll_events() const override;
  bool pass_is_cheap() const override { return false; }  // a pass is sendmsg and readv
  void abort() override;

 private:
  bool push_sends();
  bool pull_recvs();

  Socket socket_;
  bool over_unix_;
  std::deque<Pending> sends_, recvs_;  // oldest first; an entry leaves when its last byte moved
  uint64_t recvs_done_ = 0;
};

}  // namespace ringgrad::comm::net
