// MeshTransport's set-up: the sockets through the store (TCP, or a unix socket to a peer on this
// host), then a link per peer: shared memory with the peers on unix sockets that offer it, the
// socket itself for the rest. mesh_transport_progress.cpp moves the bytes.
#include "comm/transport/mesh_transport.h"

#include <unistd.h>

#include <sstream>

#include "comm/transport/shm/shm_link.h"
#include "comm/transport/socket/socket_link.h"
#include "core/error.h"
#include "core/hostname.h"
#include "core/logging.h"

namespace ringgrad::comm {

using net::Endpoint;
using net::Socket;

namespace {

constexpr uint32_t kHelloMagic = 0x52474831;  // "RGH1"

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

// "ip:port hostname host-identity unix-name shm|-", as each rank publishes itself ("shm": it
// offers shared memory to the peers it reaches over unix sockets; an entry without that field
// offers none).
void parse_published(const std::string& text, Endpoint& endpoint, std::string& hostname,
                     std::string& identity, std::string& unix_name, bool& offers_shm) {
  std::istringstream fields(text);
  std::string address, shm = "-";
  fields >> address >> hostname >> identity >> unix_name;
  const bool complete = !fields.fail();
  fields >> shm;
  offers_shm = shm == "shm";
  const auto colon = address.rfind(':');
  RG_CHECK(complete && colon != std::string::npos, "malformed ring address '", text,
           "' in the store");
  endpoint = {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

}  // namespace

MeshTransport::MeshTransport(std::shared_ptr<Store> store, std::string key_prefix, int rank,
                             int size, const MeshTransportOptions& options)
    : Transport(rank, size),
      store_(std::move(store)),
      prefix_(std::move(key_prefix)),
      peers_(static_cast<size_t>(size)) {
  RG_CHECK(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " outside world size ", size);
  interface_ = net::select_interface(options.ifname, options.store_host);
  int port = 0;
  Socket listener = net::listen_on(interface_.address, port);
  Socket unix_listener;
  Peer& me = peers_[rank];
  me.unix_name = "-";
  if (options.same_host != SameHostLink::tcp) {
    try {
      unix_listener = net::listen_unix(me.unix_name);
    } catch (const IoError& e) {  // say, a sandbox that forbids unix sockets: TCP will do
      log_warn("ring transport '", prefix_, "': rank ", rank, ": ", user_message(e),
               "; peers on this host use TCP");
    }
  }
  publish(options, port);
  connect_mesh(options, listener, unix_listener);
}

// Where and how this rank can be reached, for the others to read.
void MeshTransport::publish(const MeshTransportOptions& options, int port) {
  Peer& me = peers_[rank()];
  me.endpoint = {interface_.address, port};
  me.hostname = hostname();
  me.host_identity = net::host_identity();
  if (me.host_identity.empty()) me.host_identity = "-";
  log_info("ring transport '", prefix_, "': rank ", rank(), "/", size(), " on ", me.hostname,
           " uses interface ", interface_.name, " (", interface_.address, ":", port, "; ",
           interface_.reason, ")");
  me.offers_shm =
      options.same_host == SameHostLink::automatic || options.same_host == SameHostLink::shm;
  store_->set(prefix_ + "addr/" + std::to_string(rank()),
              me.endpoint.str() + " " + me.hostname + " " + me.host_identity + " " + me.unix_name +
                  (me.offers_shm ? " shm" : " -"));
}

// Waits for every rank to publish, then reads what they did.
void MeshTransport::read_published(const MeshTransportOptions& options) {
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
                      peers_[r].host_identity, peers_[r].unix_name, peers_[r].offers_shm);
}

MeshTransport::~MeshTransport() = default;

void MeshTransport::connect_mesh(const MeshTransportOptions& options, const Socket& listener,
                                 const Socket& unix_listener) {
  const auto deadline = Clock::now() + options.setup_timeout;
  read_published(options);
  refuse_loopback_across_hosts();

  const Hello mine{kHelloMagic, rank(), -1, size(), options.generation, fnv1a(options.run_id)};
  // Higher ranks connect to lower ones; acks flow only after accepts, so no wait cycle exists.
  for (int r = 0; r < rank(); ++r) {
    const std::string what =
        "connecting rank " + std::to_string(rank()) + " to " + describe_peer(r);
    peers_[r].socket = connect_to(r, options.same_host != SameHostLink::tcp, deadline, what);
    Hello hello = mine;
    hello.to_rank = r;
    net::write_fully(peers_[r].socket, &hello, sizeof hello, deadline, what);
  }
  for (int accepted = 0; accepted < size() - 1 - rank();) {
    Socket s = net::accept_until(
        {&listener, &unix_listener}, deadline,
        "rank " + std::to_string(rank()) + " waiting for higher ranks to connect");
    Hello hello{};
    net::read_fully(s, &hello, sizeof hello, deadline, "reading a connection handshake");
    const int from = hello.from_rank;
    std::string problem;
    if (hello.magic != kHelloMagic)
      problem = "not a ringgrad transport handshake";
    else if (hello.run_id_hash != mine.run_id_hash)
      problem = "another run id";
    else if (hello.generation != mine.generation)
      problem = "generation " + std::to_string(hello.generation) + ", expected " +
                std::to_string(mine.generation) + " (a stale worker?)";
    else if (hello.to_rank != rank() || hello.size != size() || from <= rank() || from >= size())
      problem = "ranks do not fit (from " + std::to_string(from) + " to " +
                std::to_string(hello.to_rank) + ", size " + std::to_string(hello.size) + ")";
    else if (peers_[from].socket.valid())
      problem = "rank " + std::to_string(from) + " connected twice";
    if (!problem.empty()) {
      log_warn("ring transport: rank ", rank(), " refused a connection: ", problem);
      continue;
    }
    const char ack = 'k';
    net::write_fully(s, &ack, 1, deadline, "acknowledging " + describe_peer(from));
    peers_[from].socket = std::move(s);
    ++accepted;
  }
  for (int r = 0; r < rank(); ++r) {
    char ack = 0;
    net::read_fully(peers_[r].socket, &ack, 1, deadline,
                    "rank " + std::to_string(rank()) + " waiting for the handshake reply of " +
                        describe_peer(r) + " (refused: check run id and generation)");
  }
  for (int r = 0; r < size(); ++r)
    if (r != rank()) net::tune_stream(peers_[r].socket, options.socket_buffer_bytes);
  choose_links(options.same_host, deadline);
  for (int r = 0; r < size(); ++r)
    if (r != rank())
      log_debug("ring transport '", prefix_, "': rank ", rank(), " reaches ", describe_peer(r),
                " over ", link_name(link_kind(r)));
  if (size() > 1)
    log_info("ring transport '", prefix_, "': rank ", rank(), ": ", describe_links(),
             " (RINGGRAD_TRANSPORT=shm|unix|tcp|auto)");
}

// A link per peer: shared memory with every peer reached over a unix socket (so on this host)
// that offers it too, the socket for the others. Both ends know from the store whether a pair
// shares memory, so neither waits for an offer the other never sends. With `mode` shm, a peer
// on this host without shared memory is an error, not a quiet fallback.
void MeshTransport::choose_links(SameHostLink mode, Clock::time_point deadline) {
  std::vector<shm::ShmPeerLink> shm_peers;
  for (int r = 0; r < size() && peers_[rank()].offers_shm; ++r) {
    if (r == rank()) continue;
    const Peer& p = peers_[r];
    const bool over_unix = p.socket.is_unix();
    if (over_unix && p.offers_shm)
      shm_peers.push_back({r, &p.socket});
    else if (mode == SameHostLink::shm && p.host_identity == peers_[rank()].host_identity)
      RG_THROW(IoError, "RINGGRAD_TRANSPORT=shm: rank ", rank(), " cannot share memory with ",
               describe_peer(r), " on this host: ",
               over_unix ? "that rank does not offer it (its RINGGRAD_TRANSPORT is unix or tcp?)"
                         : "they are connected over TCP (no unix socket between them)");
  }
  if (!shm_peers.empty())
    shm_ = std::make_unique<shm::ShmMesh>(rank(), shm_peers, shm::kShmRingBytes,
                                          mode == SameHostLink::shm, deadline);
  passes_are_cheap_ = true;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    Peer& p = peers_[r];
    shm::ShmChannel* channel = shm_ ? shm_->channel(r) : nullptr;
    if (channel)
      p.link = std::make_unique<shm::ShmLink>(std::move(p.socket), *channel, *shm_);
    else
      p.link = std::make_unique<net::SocketLink>(std::move(p.socket));
    passes_are_cheap_ = passes_are_cheap_ && p.link->pass_is_cheap();
  }
}

const char* link_name(LinkKind kind) {
  switch (kind) {
    case LinkKind::tcp: return "tcp";
    case LinkKind::unix_socket: return "unix";
    case LinkKind::shm: return "shm";
  }
  return "?";
}

std::string MeshTransport::describe_links() const {
  std::string out;
  for (LinkKind l : {LinkKind::shm, LinkKind::unix_socket, LinkKind::tcp}) {
    std::string ranks;
    for (int r = 0; r < size(); ++r)
      if (r != rank() && link_kind(r) == l) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    if (!ranks.empty())
      out += (out.empty() ? "" : "; ") + std::string(link_name(l)) + " to " + ranks;
  }
  return out.empty() ? "no peers" : out;
}

// A unix socket when the peer shares this kernel and network namespace and has a unix listener
// (and we may use one), else TCP. A unix connect that fails falls back to TCP: the peer accepts
// on both, so the two sides need not agree beforehand.
Socket MeshTransport::connect_to(int peer, bool unix_allowed, Clock::time_point deadline,
                                 const std::string& what) {
  Peer& p = peers_[peer];
  const std::string& mine = peers_[rank()].host_identity;
  if (unix_allowed && mine != "-" && p.host_identity == mine && p.unix_name != "-") {
    try {
      return net::connect_unix(p.unix_name, what);
    } catch (const IoError& e) {
      log_warn("ring transport: ", user_message(e), "; using TCP instead");
    }
  }
  return net::connect_until(p.endpoint, deadline, what);
}

// Loopback reaches only this host: a group that spans hosts (as their names say) and has a
// rank on loopback would hang in connect, so every rank refuses it up front, naming who is where.
void MeshTransport::refuse_loopback_across_hosts() const {
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
           interface_.reason,
           "). Set RINGGRAD_SOCKET_IFNAME to an interface the hosts share "
           "(here: ",
           net::describe_interfaces(), ")");
}

std::string MeshTransport::host_of(int r) const {
  const Peer& p = peers_[r];
  return p.host_identity != "-" ? p.host_identity : p.hostname;
}

std::string MeshTransport::describe_peer(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peers_[peer].endpoint.str() + ")";
}

}  // namespace ringgrad::comm
