// MeshTransport's progress engine: sends and receives are queued on each peer's Link, and one
// loop makes non-blocking passes over the links with work queued; when nothing moves it climbs
// the wait ladder (wait_policy.h) and at its top sleeps in poll() on the links' fds until one
// is ready or the deadline passes.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/transport/mesh_transport.h"
#include "comm/transport/wait_policy.h"
#include "core/error.h"

namespace ringgrad::comm {

void MeshTransport::begin(OperationName operation, Clock::time_point deadline) {
  operation_ = std::move(operation);
  deadline_ = deadline;
  begun_ = Clock::now();
}

void MeshTransport::post_send(int peer, const void* data, size_t bytes) {
  if (bytes > 0) peers_[peer].link->post_send(data, bytes);
}

void MeshTransport::post_recv(int peer, void* data, size_t bytes) {
  Peer& p = peers_[peer];
  ++p.recvs_posted;
  p.link->post_recv(data, bytes);
}

// A link that can fold where the bytes lie does; for the others the default lands the bytes
// and then reduces them.
void MeshTransport::recv_reduce(int peer, const Reduction& into, size_t bytes) {
  Peer& p = peers_[peer];
  if (!p.link->post_recv_reduce(into, bytes)) return Transport::recv_reduce(peer, into, bytes);
  ++p.recvs_posted;
  wait_recv(peer);
}

// Moves as many queued bytes as the link takes without blocking, in both directions.
bool MeshTransport::progress_peer(int peer) {
  try {
    return peers_[peer].link->progress();
  } catch (const IoError& e) {  // the peer exited, closed or aborted
    fail_peer(peer, user_message(e));
  }
}

bool MeshTransport::progress_all() {
  bool moved = false;
  for (int r = 0; r < size(); ++r)
    if (r != rank() && peers_[r].link->pending()) moved |= progress_peer(r);
  return moved;
}

// Sleeps until a link with pending I/O is ready (or its peer gone), a peer rings the doorbell
// those links share, or the deadline passes.
void MeshTransport::block_until_ready() {
  constexpr int kMaxFds = 257;
  pollfd fds[kMaxFds];
  int watched[kMaxFds];
  int n = 0;
  Doorbell* doorbell = nullptr;
  for (int r = 0; r < size() && n < kMaxFds - 1; ++r) {
    if (r == rank() || !peers_[r].link->pending()) continue;
    const Link& link = *peers_[r].link;
    if (link.doorbell()) doorbell = link.doorbell();
    fds[n] = {link.poll_fd(), link.poll_events(), 0};
    watched[n++] = r;
  }
  if (n == 0) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  if (left.count() <= 0) throw_timeout(std::vector<int>(watched, watched + n));
  if (doorbell) {
    fds[n] = {doorbell->fd(), POLLIN, 0};
    doorbell->begin_sleep();
    if (progress_all()) return doorbell->end_sleep();  // bytes came after the last pass
  }
  const int rc = ::poll(fds, static_cast<nfds_t>(n + (doorbell ? 1 : 0)),
                        static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
  if (doorbell) doorbell->end_sleep();
  if (rc < 0 && errno != EINTR)
    RG_THROW(IoError, operation_.str(), ": poll failed: ", std::strerror(errno));
  for (int i = 0; i < n && rc > 0; ++i) {
    if (fds[i].revents == 0) continue;
    try {
      peers_[watched[i]].link->after_poll_event();
    } catch (const IoError& e) {
      fail_peer(watched[i], user_message(e));
    }
  }
}

void MeshTransport::throw_timeout(const std::vector<int>& waiting) {
  std::string peers;
  for (int r : waiting)
    peers += (peers.empty() ? "" : ", ") +
             std::string(peers_[r].link->receiving() ? "receiving from " : "sending to ") +
             describe_peer(r);
  RG_THROW(TimeoutError, operation_.str(), " on rank ", rank(), " timed out after ",
           format_duration(std::chrono::duration_cast<Milliseconds>(Clock::now() - begun_)), " ",
           peers, "; that rank is stuck, slow or issued different collectives");
}

template <class Done>
void MeshTransport::progress_until(Done done) {
  WaitLadder ladder(passes_are_cheap_);
  while (!done()) {
    if (progress_all()) {
      ladder.moved();
    } else if (ladder.idle()) {
      block_until_ready();
      ladder.woke();
    }
  }
}

void MeshTransport::wait_recv(int peer) {
  Peer& p = peers_[peer];
  RG_CHECK(p.recvs_waited < p.recvs_posted, operation_.str(), ": wait_recv(", peer,
           ") with no receive posted");
  const uint64_t target = ++p.recvs_waited;
  const Link& link = *p.link;
  progress_until([&] { return link.recvs_done() >= target; });
}

void MeshTransport::wait_all() {
  progress_until([&] {
    for (int r = 0; r < size(); ++r)
      if (r != rank() && peers_[r].link->pending()) return false;
    return true;
  });
  for (auto& p : peers_) p.recvs_waited = p.recvs_posted;
}

std::string MeshTransport::first_failure_note() {
  try {
    if (store_->check({prefix_ + "abort"}))
      return store_->get(prefix_ + "abort", Milliseconds(1000));
  } catch (const std::exception&) {
    // The store may have died with the failed rank; the local message stands on its own.
  }
  return {};
}

void MeshTransport::fail_peer(int peer, const std::string& what) {
  std::string note = first_failure_note();
  RG_THROW(IoError, "peer ", describe_peer(peer), " closed the connection during ",
           operation_.str(), " (rank ", rank(), ", ", what, ", after ",
           format_duration(std::chrono::duration_cast<Milliseconds>(Clock::now() - begun_)), ")",
           note.empty() ? "" : "; first failure in the group: " + note);
}

void MeshTransport::abort(const std::string& reason) {
  try {
    store_->compare_set(prefix_ + "abort", "", "rank " + std::to_string(rank()) + ": " + reason);
  } catch (const std::exception&) {
    // Best effort: resetting the links below is what unblocks the peers.
  }
  for (int r = 0; r < size(); ++r)
    if (r != rank()) peers_[r].link->abort();
}

}  // namespace ringgrad::comm
