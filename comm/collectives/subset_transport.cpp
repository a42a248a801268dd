// SubsetTransport: index translation only.
#include "comm/collectives/subset_transport.h"

#include <algorithm>

#include "core/error.h"

namespace ringgrad::comm::collectives {

namespace {
int position_of(const std::vector<int>& members, int rank) {
  const auto it = std::find(members.begin(), members.end(), rank);
  RG_CHECK(it != members.end(), "SubsetTransport: rank ", rank, " is not a member");
  return static_cast<int>(it - members.begin());
}
}  // namespace

SubsetTransport::SubsetTransport(Transport& inner, std::vector<int> members)
    : Transport(position_of(members, inner.rank()), static_cast<int>(members.size())),
      inner_(inner),
      members_(std::move(members)) {}

void SubsetTransport::begin(OperationName operation, Clock::time_point deadline) {
  inner_.begin(std::move(operation), deadline);
}
void SubsetTransport::post_send(int peer, const void* data, size_t bytes) {
  inner_.post_send(members_[peer], data, bytes);
}
void SubsetTransport::post_recv(int peer, void* data, size_t bytes) {
  inner_.post_recv(members_[peer], data, bytes);
}
void SubsetTransport::wait_recv(int peer) { inner_.wait_recv(members_[peer]); }
void SubsetTransport::recv_reduce(int peer, const Reduction& into, size_t bytes) {
  inner_.recv_reduce(members_[peer], into, bytes);
}
void SubsetTransport::wait_all() { inner_.wait_all(); }
uint64_t SubsetTransport::recvs_completed(int peer) const {
  return inner_.recvs_completed(members_[peer]);
}
std::string SubsetTransport::describe_peer(int peer) const {
  return inner_.describe_peer(members_[peer]);
}
std::string SubsetTransport::host_of(int r) const { return inner_.host_of(members_[r]); }

}  // namespace ringgrad::comm::collectives
