// SocketTransport's progress engine: sends and receives are queued per peer and moved either
// with writev/readv on the peer's socket (so a fingerprint and its payload leave in one system
// call) or through its shared-memory rings; when nothing moves we yield and retry for a while
// (see kSpin) and then sleep in poll() on the sockets and the shared-memory doorbell until the
// deadline.
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/transport/socket/socket_transport.h"
#include "core/error.h"

namespace ringgrad::comm::net {

namespace {

constexpr int kMaxIov = 64;
// How long a wait keeps retrying, yielding the CPU between passes, before it sleeps in poll().
// Small messages on loopback arrive within microseconds, and a wake-up from poll() costs more
// than that. With more ranks than cores the yield also hands our core to the peer we wait
// for, which halves small-message latency there (docs/measurements.md).
constexpr auto kSpin = std::chrono::microseconds(200);
// Idle passes made before the first yield when every peer is on shared memory: a few
// microseconds of pure spinning, in which bytes from a peer spinning on another core arrive
// without a system call (docs/measurements.md). A pass over sockets is itself system calls,
// so with socket peers the yield starts at once. The clock is read every kPassesPerClockRead
// passes only.
constexpr uint32_t kBusyPasses = 64;
constexpr uint32_t kPassesPerClockRead = 16;

// The oldest unfinished entries of a send or receive queue, from `head` on, as iovecs.
template <class Io>
int gather(const std::vector<Io>& queue, size_t head, iovec (&iov)[kMaxIov]) {
  int n = 0;
  for (size_t i = head; i < queue.size() && n < kMaxIov; ++i, ++n)
    iov[n] = {queue[i].data, queue[i].left};
  return n;
}

// Marks `bytes` of the queue, from `head` on, as moved; returns how many entries that finished.
template <class Io>
size_t advance(std::vector<Io>& queue, size_t& head, size_t bytes) {
  size_t finished = 0;
  while (bytes > 0) {
    Io& io = queue[head];
    const size_t take = std::min(bytes, io.left);
    io.data += take, io.left -= take, bytes -= take;
    if (io.left == 0) ++head, ++finished;
  }
  return finished;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void SocketTransport::begin(OperationName operation, Clock::time_point deadline) {
  operation_ = std::move(operation);
  deadline_ = deadline;
  begun_ = Clock::now();
}

void SocketTransport::post_send(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return;
  Peer& p = peers_[peer];
  if (p.shm) return p.shm->post_send(data, bytes);
  p.sends.push_back({static_cast<char*>(const_cast<void*>(data)), bytes});
}

void SocketTransport::post_recv(int peer, void* data, size_t bytes) {
  Peer& p = peers_[peer];
  ++p.recvs_posted;
  if (p.shm) return p.shm->post_recv(data, bytes);
  p.recvs.push_back({static_cast<char*>(data), bytes});
}

// A peer on shared memory folds straight from its ring or its memory; a socket peer's bytes
// are landed and reduced by the default.
void SocketTransport::recv_reduce(int peer, const Reduction& into, size_t bytes) {
  Peer& p = peers_[peer];
  if (!p.shm) return Transport::recv_reduce(peer, into, bytes);
  ++p.recvs_posted;
  p.shm->post_recv_reduce(into, bytes);
  wait_recv(peer);
}

bool SocketTransport::pending(int peer) const {
  const Peer& p = peers_[peer];
  return p.shm ? p.shm->sending() || p.shm->receiving() : !p.sends.empty() || !p.recvs.empty();
}

bool SocketTransport::receiving(int peer) const {
  const Peer& p = peers_[peer];
  return p.shm ? p.shm->receiving() : !p.recvs.empty();
}

// Moves as many queued bytes as the link takes without blocking, in both directions.
bool SocketTransport::progress_peer(int peer) {
  Peer& p = peers_[peer];
  if (p.shm) {
    bool moved = false;
    try {
      moved = p.shm->progress();
    } catch (const IoError& e) {  // it exited (its memory is gone) or aborted
      fail_peer(peer, user_message(e));
    }
    p.recvs_done = p.shm->recvs_done();
    return moved;
  }
  const bool moved = progress_socket(p, peer);
  if (p.send_head == p.sends.size()) p.sends.clear(), p.send_head = 0;
  if (p.recv_head == p.recvs.size()) p.recvs.clear(), p.recv_head = 0;
  return moved;
}

bool SocketTransport::progress_socket(Peer& p, int peer) {
  bool moved = false;
  while (p.send_head < p.sends.size()) {
    iovec iov[kMaxIov];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(gather(p.sends, p.send_head, iov));
    ssize_t sent = ::sendmsg(p.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      fail_peer(peer, std::strerror(errno));
    }
    moved = true;
    advance(p.sends, p.send_head, static_cast<size_t>(sent));
  }
  auto retire_empty = [&] {
    while (p.recv_head < p.recvs.size() && p.recvs[p.recv_head].left == 0)
      ++p.recv_head, ++p.recvs_done;
  };
  retire_empty();
  while (p.recv_head < p.recvs.size()) {
    iovec iov[kMaxIov];
    ssize_t got = ::readv(p.socket.fd(), iov, gather(p.recvs, p.recv_head, iov));
    if (got == 0) fail_peer(peer, "end of stream");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      fail_peer(peer, std::strerror(errno));
    }
    moved = true;
    p.recvs_done += advance(p.recvs, p.recv_head, static_cast<size_t>(got));
    retire_empty();
  }
  return moved;
}

bool SocketTransport::progress_all() {
  bool moved = false;
  for (int r = 0; r < size(); ++r)
    if (r != rank() && pending(r)) moved |= progress_peer(r);
  return moved;
}

// Sleeps until a socket with pending I/O is ready, a peer rings the shared-memory doorbell
// (Note [shm doorbell]), or the socket of a peer on shared memory closes: nothing else flows
// on that socket after set-up, so any event there means the peer is gone (or aborted).
void SocketTransport::block_until_ready() {
  constexpr int kMaxFds = 257;
  pollfd fds[kMaxFds];
  int watched[kMaxFds];
  int n = 0;
  bool shm_pending = false;
  for (int r = 0; r < size() && n < kMaxFds - 1; ++r) {
    const Peer& p = peers_[r];
    if (r == rank() || !pending(r)) continue;
    shm_pending |= p.shm != nullptr;
    const short events =
        p.shm
            ? POLLIN
            : static_cast<short>((p.sends.empty() ? 0 : POLLOUT) | (p.recvs.empty() ? 0 : POLLIN));
    fds[n] = {p.socket.fd(), events, 0};
    watched[n++] = r;
  }
  if (n == 0) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  if (left.count() <= 0) {
    std::string waiting;
    for (int i = 0; i < n; ++i)
      waiting += (i ? ", " : "") +
                 std::string(receiving(watched[i]) ? "receiving from " : "sending to ") +
                 describe_peer(watched[i]);
    RG_THROW(TimeoutError, operation_.str(), " on rank ", rank(), " timed out after ",
             format_duration(std::chrono::duration_cast<Milliseconds>(Clock::now() - begun_)), " ",
             waiting, "; that rank is stuck, slow or issued different collectives");
  }
  if (shm_pending) {
    fds[n] = {shm_->doorbell_fd(), POLLIN, 0};
    shm_->begin_sleep();
    if (progress_all()) return shm_->end_sleep();  // bytes came after the last pass
  }
  const int rc = ::poll(fds, static_cast<nfds_t>(n + (shm_pending ? 1 : 0)),
                        static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
  if (shm_pending) shm_->end_sleep();
  if (rc < 0 && errno != EINTR)
    RG_THROW(IoError, operation_.str(), ": poll failed: ", std::strerror(errno));
  for (int i = 0; i < n && rc > 0; ++i) {
    const int r = watched[i];
    if (!peers_[r].shm || fds[i].revents == 0) continue;
    progress_peer(r);  // what the peer left in the ring before it went still counts
    if (pending(r)) fail_peer(r, "its socket closed, so the process is gone or aborted");
  }
}

template <class Done>
void SocketTransport::progress_until(Done done) {
  const uint32_t busy_passes = all_shm_ ? kBusyPasses : 1;
  Clock::time_point spin_until;  // set when the busy passes are over
  for (uint32_t idle = 0; !done();) {
    if (progress_all()) {
      idle = 0;
    } else if (++idle < busy_passes) {
      cpu_relax();
    } else if (idle == busy_passes) {
      spin_until = Clock::now() + kSpin;
    } else if (idle % kPassesPerClockRead == 0 && Clock::now() > spin_until) {
      block_until_ready();
      idle = busy_passes;  // after a wake-up, straight back to yielding, then to poll()
      spin_until = Clock::now();
    } else {
      sched_yield();
    }
  }
}

void SocketTransport::wait_recv(int peer) {
  Peer& p = peers_[peer];
  RG_CHECK(p.recvs_waited < p.recvs_posted, operation_.str(), ": wait_recv(", peer,
           ") with no receive posted");
  const uint64_t target = ++p.recvs_waited;
  progress_until([&] { return peers_[peer].recvs_done >= target; });
}

void SocketTransport::wait_all() {
  progress_until([&] {
    for (int r = 0; r < size(); ++r)
      if (r != rank() && pending(r)) return false;
    return true;
  });
  for (auto& p : peers_) p.recvs_waited = p.recvs_posted;
}

std::string SocketTransport::first_failure_note() {
  try {
    if (store_->check({prefix_ + "abort"}))
      return store_->get(prefix_ + "abort", Milliseconds(1000));
  } catch (const std::exception&) {
    // The store may have died with the failed rank; the local message stands on its own.
  }
  return {};
}

void SocketTransport::fail_peer(int peer, const std::string& what) {
  std::string note = first_failure_note();
  RG_THROW(IoError, "peer ", describe_peer(peer), " closed the connection during ",
           operation_.str(), " (rank ", rank(), ", ", what, ", after ",
           format_duration(std::chrono::duration_cast<Milliseconds>(Clock::now() - begun_)), ")",
           note.empty() ? "" : "; first failure in the group: " + note);
}

void SocketTransport::abort(const std::string& reason) {
  try {
    store_->compare_set(prefix_ + "abort", "", "rank " + std::to_string(rank()) + ": " + reason);
  } catch (const std::exception&) {
    // Best effort: resetting the connections below is what unblocks the peers.
  }
  for (auto& p : peers_) {
    p.socket.abort();
    if (p.shm) p.shm->abort();
    p.sends.clear(), p.recvs.clear();
    p.send_head = p.recv_head = 0;
  }
}

}  // namespace ringgrad::comm::net
