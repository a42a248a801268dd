// SocketLink: the queues, moved with sendmsg/readv without blocking.
#include "comm/transport/socket/socket_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ringgrad::comm::net {

namespace {

constexpr int kMaxIov = 64;

// The oldest entries of a queue as iovecs (at most kMaxIov); returns how many.
int gather(const std::deque<SocketLink::Pending>& queue, iovec (&iov)[kMaxIov]) {
  const int n = static_cast<int>(std::min<size_t>(queue.size(), kMaxIov));
  for (int i = 0; i < n; ++i) iov[i] = {queue[i].data, queue[i].left};
  return n;
}

// Marks `bytes` of the queue as moved; returns how many entries that finished (and dropped).
size_t advance(std::deque<SocketLink::Pending>& queue, size_t bytes) {
  size_t finished = 0;
  while (bytes > 0) {
    SocketLink::Pending& io = queue.front();
    const size_t take = std::min(bytes, io.left);
    io.data += take;
    io.left -= take;
    bytes -= take;
    if (io.left > 0) break;
    queue.pop_front();
    ++finished;
  }
  return finished;
}

}  // namespace

SocketLink::SocketLink(Socket socket) : socket_(std::move(socket)), over_unix_(socket_.is_unix()) {}

LinkKind SocketLink::kind() const { return over_unix_ ? LinkKind::unix_socket : LinkKind::tcp; }

void SocketLink::post_send(const void* data, size_t bytes) {
  sends_.push_back({static_cast<char*>(const_cast<void*>(data)), bytes});
}

void SocketLink::post_recv(void* data, size_t bytes) {
  recvs_.push_back({static_cast<char*>(data), bytes});
}

bool SocketLink::progress() {
  const bool sent = push_sends();
  return pull_recvs() || sent;
}

bool SocketLink::push_sends() {
  bool moved = false;
  while (!sends_.empty()) {
    iovec iov[kMaxIov];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(gather(sends_, iov));
    const ssize_t sent = ::sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      RG_THROW(IoError, std::strerror(errno));
    }
    moved = true;
    advance(sends_, static_cast<size_t>(sent));
  }
  return moved;
}

bool SocketLink::pull_recvs() {
  bool moved = false;
  auto retire_empty = [&] {  // a zero-byte receive completes in its turn, with nothing to read
    while (!recvs_.empty() && recvs_.front().left == 0) {
      recvs_.pop_front();
      ++recvs_done_;
    }
  };
  retire_empty();
  while (!recvs_.empty()) {
    iovec iov[kMaxIov];
    const ssize_t got = ::readv(socket_.fd(), iov, gather(recvs_, iov));
    if (got == 0) RG_THROW(IoError, "end of stream");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      RG_THROW(IoError, std::strerror(errno));
    }
    moved = true;
    recvs_done_ += advance(recvs_, static_cast<size_t>(got));
    retire_empty();
  }
  return moved;
}

short SocketLink::poll_events() const {
  return static_cast<short>((sends_.empty() ? 0 : POLLOUT) | (recvs_.empty() ? 0 : POLLIN));
}

void SocketLink::abort() {
  socket_.abort();
  sends_.clear();
  recvs_.clear();
}

}  // namespace ringgrad::comm::net
