// SocketTransport: mesh setup through the store (TCP, or a unix socket to a peer on this host),
// then a poll()-driven progress engine. Sends and receives are queued per peer and moved with
// writev/readv, so a fingerprint and its payload leave in one system call; when nothing moves
// we yield and retry for a while (see kSpin) and then sleep in poll() until the deadline.
#include "comm/transport/socket/socket_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm::net {

namespace {

constexpr uint32_t kHelloMagic = 0x52474831;  // "RGH1"
constexpr int kMaxIov = 64;
// How long a wait keeps retrying, yielding the CPU between passes, before it sleeps in poll().
// Small messages on loopback arrive within microseconds, and a wake-up from poll() costs more
// than that. With more ranks than cores the yield also hands our core to the peer we wait
// for, which halves small-message latency there (docs/measurements.md).
constexpr auto kSpin = std::chrono::microseconds(200);

struct Hello {
  uint32_t magic;
  int32_t from_rank;
  int32_t to_rank;
  int32_t size;
  int64_t generation;
  uint64_t run_id_hash;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string local_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// "ip:port hostname host-identity unix-name", as each rank publishes itself.
void parse_published(const std::string& text, Endpoint& endpoint, std::string& hostname,
                     std::string& identity, std::string& unix_name) {
  std::istringstream fields(text);
  std::string address;
  fields >> address >> hostname >> identity >> unix_name;
  const auto colon = address.rfind(':');
  RG_CHECK(!fields.fail() && colon != std::string::npos, "malformed ring address '", text, "' in the store");
  endpoint = {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

}  // namespace

SocketTransport::SocketTransport(std::shared_ptr<Store> store, std::string key_prefix, int rank,
                           int size, const SocketTransportOptions& options)
    : Transport(rank, size), store_(std::move(store)), prefix_(std::move(key_prefix)),
      peers_(static_cast<size_t>(size)) {
  RG_CHECK(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " outside world size ", size);
  interface_ = select_interface(options.ifname, options.store_host);
  int port = 0;
  Socket listener = listen_on(interface_.address, port);
  Peer& me = peers_[rank];
  me.endpoint = {interface_.address, port};
  me.hostname = local_hostname();
  me.host_identity = host_identity();
  if (me.host_identity.empty()) me.host_identity = "-";
  Socket unix_listener;
  me.unix_name = "-";
  if (options.unix_sockets_on_same_host) {
    try {
      unix_listener = listen_unix(me.unix_name);
    } catch (const IoError& e) {  // say, a sandbox that forbids unix sockets: TCP will do
      log_warn("ring transport '", prefix_, "': rank ", rank, ": ", e.what(), "; peers on this host use TCP");
    }
  }
  log_info("ring transport '", prefix_, "': rank ", rank, "/", size, " on ", me.hostname, " uses interface ",
           interface_.name, " (", interface_.address, ":", port, "; ", interface_.reason, ")");
  store_->set(prefix_ + "addr/" + std::to_string(rank), me.endpoint.str() + " " + me.hostname +
                                                            " " + me.host_identity + " " + me.unix_name);
  connect_mesh(options, listener, unix_listener);
}

SocketTransport::~SocketTransport() = default;

void SocketTransport::connect_mesh(const SocketTransportOptions& options, const Socket& listener,
                                const Socket& unix_listener) {
  const auto deadline = Clock::now() + options.setup_timeout;
  std::vector<std::string> keys;
  for (int r = 0; r < size(); ++r) keys.push_back(prefix_ + "addr/" + std::to_string(r));
  try {
    store_->wait(keys, options.setup_timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int r = 0; r < size(); ++r)
      if (!store_->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    RG_THROW(TimeoutError, "ring process group setup: rank ", rank(), " waited ",
             format_duration(options.setup_timeout), " for all ", size(),
             " ranks to join; missing ranks: ", missing,
             " (did they start, and do they use the same store and group name?)");
  }
  for (int r = 0; r < size(); ++r)
    if (r != rank())
      parse_published(store_->get(keys[r]), peers_[r].endpoint, peers_[r].hostname,
                      peers_[r].host_identity, peers_[r].unix_name);
  refuse_loopback_across_hosts();

  const Hello mine{kHelloMagic, rank(), -1, size(), options.generation, fnv1a(options.run_id)};
  // Higher ranks connect to lower ones; acks flow only after accepts, so no wait cycle exists.
  for (int r = 0; r < rank(); ++r) {
    const std::string what = "connecting rank " + std::to_string(rank()) + " to " + describe_peer(r);
    peers_[r].socket = connect_to(r, options.unix_sockets_on_same_host, deadline, what);
    Hello hello = mine;
    hello.to_rank = r;
    write_fully(peers_[r].socket, &hello, sizeof hello, deadline, what);
  }
  for (int accepted = 0; accepted < size() - 1 - rank();) {
    Socket s = accept_until({&listener, &unix_listener}, deadline,
                            "rank " + std::to_string(rank()) + " waiting for higher ranks to connect");
    Hello hello{};
    read_fully(s, &hello, sizeof hello, deadline, "reading a connection handshake");
    const int from = hello.from_rank;
    std::string problem;
    if (hello.magic != kHelloMagic) problem = "not a ringgrad transport handshake";
    else if (hello.run_id_hash != mine.run_id_hash) problem = "another run id";
    else if (hello.generation != mine.generation)
      problem = "generation " + std::to_string(hello.generation) + ", expected " +
                std::to_string(mine.generation) + " (a stale worker?)";
    else if (hello.to_rank != rank() || hello.size != size() || from <= rank() || from >= size())
      problem = "ranks do not fit (from " + std::to_string(from) + " to " +
                std::to_string(hello.to_rank) + ", size " + std::to_string(hello.size) + ")";
    else if (peers_[from].socket.valid()) problem = "rank " + std::to_string(from) + " connected twice";
    if (!problem.empty()) {
      log_warn("ring transport: rank ", rank(), " refused a connection: ", problem);
      continue;
    }
    const char ack = 'k';
    write_fully(s, &ack, 1, deadline, "acknowledging " + describe_peer(from));
    peers_[from].over_unix = s.is_unix();
    peers_[from].socket = std::move(s);
    ++accepted;
  }
  for (int r = 0; r < rank(); ++r) {
    char ack = 0;
    read_fully(peers_[r].socket, &ack, 1, deadline,
               "rank " + std::to_string(rank()) + " waiting for the handshake reply of " +
                   describe_peer(r) + " (refused: check run id and generation)");
  }
  std::string unix_peers;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    tune_stream(peers_[r].socket, options.socket_buffer_bytes);
    if (peers_[r].over_unix) unix_peers += (unix_peers.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!unix_peers.empty())
    log_info("ring transport '", prefix_, "': rank ", rank(), " reaches ranks ", unix_peers,
             " on this host over unix sockets (RINGGRAD_TRANSPORT=tcp: TCP instead)");
}

// A unix socket when the peer shares this kernel and network namespace and has a unix listener
// (and we may use one), else TCP. A unix connect that fails falls back to TCP: the peer accepts
// on both, so the two sides need not agree beforehand.
Socket SocketTransport::connect_to(int peer, bool unix_allowed, Clock::time_point deadline,
                                const std::string& what) {
  Peer& p = peers_[peer];
  const std::string& mine = peers_[rank()].host_identity;
  if (unix_allowed && mine != "-" && p.host_identity == mine && p.unix_name != "-") {
    try {
      Socket s = connect_unix(p.unix_name, what);
      p.over_unix = true;
      return s;
    } catch (const IoError& e) {
      log_warn("ring transport: ", e.what(), "; using TCP instead");
    }
  }
  return connect_until(p.endpoint, deadline, what);
}

// Loopback reaches only this host: a group that spans hosts (as their names say) and has a
// rank on loopback would hang in connect, so every rank refuses it up front, naming who is where.
void SocketTransport::refuse_loopback_across_hosts() const {
  std::string on_loopback, hosts;
  bool one_host = true;
  for (int r = 0; r < size(); ++r) {
    one_host = one_host && peers_[r].hostname == peers_[0].hostname;
    if (peers_[r].endpoint.is_loopback())
      on_loopback += (on_loopback.empty() ? "" : ", ") + std::to_string(r);
    hosts += (r ? ", " : "") + std::to_string(r) + " on " + peers_[r].hostname;
  }
  if (one_host || on_loopback.empty()) return;
  RG_THROW(InvalidArgument, "ring process group setup: ranks ", on_loopback,
           " listen on loopback, which other hosts cannot reach, but the group spans hosts (",
           hosts, "); rank ", rank(), " chose ", interface_.name, " (", interface_.address, "; ",
           interface_.reason, "). Set RINGGRAD_SOCKET_IFNAME to an interface the hosts share "
           "(here: ", describe_interfaces(), ")");
}

std::string SocketTransport::host_of(int r) const {
  const Peer& p = peers_[r];
  return p.host_identity != "-" ? p.host_identity : p.hostname;
}

std::string SocketTransport::describe_peer(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peers_[peer].endpoint.str() + ")";
}

void SocketTransport::begin(const std::string& operation, Clock::time_point deadline) {
  operation_ = operation;
  deadline_ = deadline;
  begun_ = Clock::now();
}

void SocketTransport::post_send(int peer, const void* data, size_t bytes) {
  if (bytes == 0) return;
  peers_[peer].sends.push_back({static_cast<char*>(const_cast<void*>(data)), bytes});
}

void SocketTransport::post_recv(int peer, void* data, size_t bytes) {
  peers_[peer].recvs.push_back({static_cast<char*>(data), bytes});
  ++peers_[peer].recvs_posted;
}

// Moves as many queued bytes as the socket takes without blocking, in both directions.
bool SocketTransport::progress_peer(int peer) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (p.send_head < p.sends.size()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (size_t i = p.send_head; i < p.sends.size() && n < kMaxIov; ++i, ++n)
      iov[n] = {p.sends[i].data, p.sends[i].left};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t sent = ::sendmsg(p.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      fail_peer(peer, std::strerror(errno));
    }
    moved = true;
    for (auto left = static_cast<size_t>(sent); left > 0;) {
      PendingIo& io = p.sends[p.send_head];
      size_t take = std::min(left, io.left);
      io.data += take;
      io.left -= take;
      left -= take;
      if (io.left == 0) ++p.send_head;
    }
  }
  if (p.send_head == p.sends.size()) p.sends.clear(), p.send_head = 0;
  auto retire_empty = [&] {
    while (p.recv_head < p.recvs.size() && p.recvs[p.recv_head].left == 0)
      ++p.recv_head, ++p.recvs_done;
  };
  retire_empty();
  while (p.recv_head < p.recvs.size()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (size_t i = p.recv_head; i < p.recvs.size() && n < kMaxIov; ++i, ++n)
      iov[n] = {p.recvs[i].data, p.recvs[i].left};
    ssize_t got = ::readv(p.socket.fd(), iov, n);
    if (got == 0) fail_peer(peer, "end of stream");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      fail_peer(peer, std::strerror(errno));
    }
    moved = true;
    for (auto left = static_cast<size_t>(got); left > 0;) {
      PendingIo& io = p.recvs[p.recv_head];
      size_t take = std::min(left, io.left);
      io.data += take;
      io.left -= take;
      left -= take;
      if (io.left == 0) ++p.recv_head, ++p.recvs_done;
    }
    retire_empty();
  }
  if (p.recv_head == p.recvs.size()) p.recvs.clear(), p.recv_head = 0;
  return moved;
}

bool SocketTransport::progress_all() {
  bool moved = false;
  for (int r = 0; r < size(); ++r)
    if (r != rank() && (!peers_[r].sends.empty() || !peers_[r].recvs.empty()))
      moved |= progress_peer(r);
  return moved;
}

void SocketTransport::block_until_ready() {
  pollfd fds[256];
  int watched[256];
  int n = 0;
  for (int r = 0; r < size() && n < 256; ++r) {
    const Peer& p = peers_[r];
    if (r == rank() || (p.sends.empty() && p.recvs.empty())) continue;
    short events = static_cast<short>((p.sends.empty() ? 0 : POLLOUT) | (p.recvs.empty() ? 0 : POLLIN));
    fds[n] = {p.socket.fd(), events, 0};
    watched[n++] = r;
  }
  if (n == 0) return;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  if (left.count() <= 0) {
    std::string waiting;
    for (int i = 0; i < n; ++i)
      waiting += (i ? ", " : "") + std::string(peers_[watched[i]].recvs.empty() ? "sending to " : "receiving from ") +
                 describe_peer(watched[i]);
    RG_THROW(TimeoutError, operation_, " on rank ", rank(), " timed out after ",
             format_duration(std::chrono::duration_cast<Milliseconds>(Clock::now() - begun_)),
             " ", waiting, "; that rank is stuck, slow or issued different collectives");
  }
  int rc = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
  if (rc < 0 && errno != EINTR) RG_THROW(IoError, operation_, ": poll failed: ", std::strerror(errno));
}

template <class Done>
void SocketTransport::progress_until(Done done) {
  auto spin_until = Clock::now() + kSpin;
  while (!done()) {
    if (progress_all()) {
      spin_until = Clock::now() + kSpin;
    } else if (Clock::now() > spin_until) {
      block_until_ready();
    } else {
      sched_yield();
    }
  }
}

void SocketTransport::wait_recv(int peer) {
  Peer& p = peers_[peer];
  RG_CHECK(p.recvs_waited < p.recvs_posted, operation_, ": wait_recv(", peer, ") with no receive posted");
  const uint64_t target = ++p.recvs_waited;
  progress_until([&] { return peers_[peer].recvs_done >= target; });
}

void SocketTransport::wait_all() {
  progress_until([&] {
    for (int r = 0; r < size(); ++r)
      if (r != rank() && (!peers_[r].sends.empty() || !peers_[r].recvs.empty())) return false;
    return true;
  });
  for (auto& p : peers_) p.recvs_waited = p.recvs_posted;
}

std::string SocketTransport::first_failure_note() {
  try {
    if (store_->check({prefix_ + "abort"})) return store_->get(prefix_ + "abort", Milliseconds(1000));
  } catch (const std::exception&) {
    // The store may have died with the failed rank; the local message stands on its own.
  }
  return {};
}

void SocketTransport::fail_peer(int peer, const std::string& what) {
  std::string note = first_failure_note();
  RG_THROW(IoError, "peer ", describe_peer(peer), " closed the connection during ", operation_,
           " (rank ", rank(), ", ", what, ", after ",
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
    p.sends.clear(), p.recvs.clear();
    p.send_head = p.recv_head = 0;
  }
}

}  // namespace ringgrad::comm::net
