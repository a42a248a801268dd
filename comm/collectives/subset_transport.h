// SubsetTransport: some ranks of a group seen as a group of their own, so that any algorithm of
// this folder runs among them unchanged (the hierarchical all-reduce runs a ring among the
// ranks of one host, and another among one leader per host). Member i of `members` is rank i
// here; every call maps to the underlying transport, which keeps the deadline and the errors
// (naming the real ranks).
#pragma once
#include <vector>

#include "comm/transport/transport.h"

namespace ringgrad::comm::collectives {

class SubsetTransport : public Transport {
 public:
  // `members`: ranks of `inner`, ascending, this rank among them.
  SubsetTransport(Transport& inner, std::vector<int> members);

  void begin(OperationName operation, Clock::time_point deadline) override;
  void post_send(int peer, const void* data, size_t bytes) override;
  void post_recv(int peer, void* data, size_t bytes) override;
  void wait_recv(int peer) override;
  void recv_reduce(int peer, const Reduction& into, size_t bytes) override;
  void wait_all() override;
  uint64_t recvs_completed(int peer) const override;
  std::string describe_peer(int peer) const override;
  std::string host_of(int r) const override;

 private:
  Transport& inner_;
  std::vector<int> members_;
};

}  // namespace ringgrad::comm::collectives
