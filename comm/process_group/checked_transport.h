// CheckedTransport: wraps the group's Transport for one collective at a time and makes every
// collective self-describing. start() queues this rank's Fingerprint to each participating
// peer (ahead of any payload, so it leaves in the same writev) and a receive for theirs; the
// first wait on a peer compares that peer's fingerprint before any payload, and finish()
// checks the rest. A mismatch throws at once with both fingerprints; a timeout names the
// ranks whose fingerprint never came (they have not started this collective).
#pragma once
#include <string>
#include <vector>

#include "comm/process_group/fingerprint.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm {

class CheckedTransport : public Transport {
 public:
  explicit CheckedTransport(Transport& inner);

  // `peers`: the ranks that take part (every other one, for a collective). The transport's
  // errors name the operation as describe(mine) says, built only if one happens.
  void start(const Fingerprint& mine, const std::vector<int>& peers, Clock::time_point deadline);
  void finish();  // checks every fingerprint not yet compared, then completes all I/O

  void begin(OperationName operation, Clock::time_point deadline) override;
  void post_send(int peer, const void* data, size_t bytes) override;
  void post_recv(int peer, void* data, size_t bytes) override;
  void wait_recv(int peer) override;
  void recv_reduce(int peer, const Reduction& into, size_t bytes) override;
  void wait_all() override;
  uint64_t recvs_completed(int peer) const override { return inner_.recvs_completed(peer); }
  std::string describe_peer(int peer) const override { return inner_.describe_peer(peer); }
  std::string host_of(int r) const override { return inner_.host_of(r); }

 private:
  void check_fingerprint(int peer);  // waits for it if needed
  void check_all();
  [[noreturn]] void rethrow_timeout(const std::exception& e);

  Transport& inner_;
  Fingerprint mine_;
  std::vector<Fingerprint> theirs_;  // indexed by rank
  std::vector<int> peers_;
  std::vector<char> unchecked_;             // 1 while theirs_[peer] has not been compared
  std::vector<uint64_t> fingerprint_recv_;  // recvs_completed value once theirs_ arrived
};

}  // namespace ringgrad::comm
