// CheckedTransport: fingerprint exchange piggy-backed on the collective's first messages.
#include "comm/process_group/checked_transport.h"

#include "core/error.h"

namespace ringgrad::comm {

CheckedTransport::CheckedTransport(Transport& inner)
    : Transport(inner.rank(), inner.size()),
      inner_(inner),
      theirs_(static_cast<size_t>(inner.size())),
      unchecked_(static_cast<size_t>(inner.size()), 0),
      fingerprint_recv_(static_cast<size_t>(inner.size()), 0) {}

void CheckedTransport::start(const Fingerprint& mine, const std::vector<int>& peers,
                             Clock::time_point deadline) {
  mine_ = mine;  // lives until the next start, as the name must
  inner_.begin(OperationName([this] { return describe(mine_); }), deadline);
  peers_ = peers;
  for (int peer : peers_) {
    inner_.post_send(peer, &mine_, sizeof mine_);
    fingerprint_recv_[peer] = inner_.recvs_completed(peer) + 1;
    inner_.post_recv(peer, &theirs_[peer], sizeof(Fingerprint));
    unchecked_[peer] = 1;
  }
}

void CheckedTransport::begin(OperationName operation, Clock::time_point deadline) {
  inner_.begin(std::move(operation), deadline);
}

void CheckedTransport::post_send(int peer, const void* data, size_t bytes) {
  inner_.post_send(peer, data, bytes);
}

void CheckedTransport::post_recv(int peer, void* data, size_t bytes) {
  inner_.post_recv(peer, data, bytes);
}

void CheckedTransport::check_fingerprint(int peer) {
  if (!unchecked_[peer]) return;
  try {
    inner_.wait_recv(peer);  // the fingerprint is the first receive posted for this peer
  } catch (const TimeoutError& e) {
    rethrow_timeout(e);
  }
  unchecked_[peer] = 0;
  if (!same_collective(mine_, theirs_[peer]))
    RG_THROW(
        Error, "collective mismatch: rank ", rank(), " issued ", describe(mine_), " but rank ",
        peer, " issued ", describe(theirs_[peer]),
        "; every rank must issue the same collectives, with the same sizes, in the same order");
}

void CheckedTransport::check_all() {
  for (int peer : peers_) check_fingerprint(peer);
}

void CheckedTransport::wait_recv(int peer) {
  check_fingerprint(peer);
  try {
    inner_.wait_recv(peer);
  } catch (const TimeoutError& e) {
    rethrow_timeout(e);
  }
}

void CheckedTransport::recv_reduce(int peer, const Reduction& into, size_t bytes) {
  check_fingerprint(peer);
  try {
    inner_.recv_reduce(peer, into, bytes);
  } catch (const TimeoutError& e) {
    rethrow_timeout(e);
  }
}

void CheckedTransport::wait_all() {
  check_all();
  try {
    inner_.wait_all();
  } catch (const TimeoutError& e) {
    rethrow_timeout(e);
  }
}

void CheckedTransport::finish() { wait_all(); }

void CheckedTransport::rethrow_timeout(const std::exception& e) {
  std::string arrived, missing;
  for (int peer : peers_) {
    std::string& list = inner_.recvs_completed(peer) >= fingerprint_recv_[peer] ? arrived : missing;
    list += (list.empty() ? "" : ", ") + std::to_string(peer);
  }
  RG_THROW(TimeoutError, describe(mine_), " on rank ", rank(), ": ",
           missing.empty() ? "all ranks started it, but data stopped flowing"
                           : "ranks that never started it: " + missing,
           " (started: ", arrived.empty() ? "none" : arrived, "); ", user_message(e));
}

}  // namespace ringgrad::comm
