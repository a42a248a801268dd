// SocketTransport: a full mesh of stream connections between the ranks of one process group, set
// up through the Store (each rank publishes "<prefix>addr/<rank>" = "ip:port hostname
// host-identity unix-name shm|-"; a higher rank connects to every lower one and a handshake checks
// run id, generation and both ranks), then driven on the calling thread (the group's worker).
// Peers on other hosts are reached over TCP; peers on this host (same kernel and network
// namespace) over a unix socket, which moves the same byte stream without the TCP/IP
// processing, and their payload then goes through shared-memory rings (comm/transport/shm/),
// with the socket kept to notice the peer's death. One progress loop moves the bytes of every
// peer, whatever its link (socket_transport_progress.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store/store.h"
#include "comm/transport/shm/shm_mesh.h"
#include "comm/transport/socket/socket.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm::net {

// How a peer's bytes travel.
enum class Link { tcp, unix_socket, shm };
const char* link_name(Link link);  // "tcp", "unix", "shm"

// What peers on this host are reached by (peers on other hosts always use TCP):
//   automatic    shared memory, else (it could not be set up) a unix socket, else TCP
//   shm          shared memory; a peer on this host without it is an error
//   unix_socket  a unix socket, else TCP
//   tcp          TCP
enum class SameHostLink { automatic, shm, unix_socket, tcp };

struct SocketTransportOptions {
  std::string run_id;      // must match on every rank (the handshake refuses strangers)
  int64_t generation = 0;  // a worker of another restart generation is refused
  Milliseconds setup_timeout{300'000};
  int socket_buffer_bytes = 4 << 20;
  std::optional<std::string> ifname;  // RINGGRAD_SOCKET_IFNAME
  std::string store_host;             // the store's host (MASTER_ADDR); "" for an in-process store
  SameHostLink same_host = SameHostLink::automatic;  // RINGGRAD_TRANSPORT
};

class SocketTransport : public Transport {
 public:
  // Blocks until every rank is connected or throws TimeoutError naming the missing ranks.
  // Throws InvalidArgument when a rank listens on loopback while the ranks span hosts.
  SocketTransport(std::shared_ptr<Store> store, std::string key_prefix, int rank, int size,
                  const SocketTransportOptions& options);
  ~SocketTransport() override;

  void begin(OperationName operation, Clock::time_point deadline) override;
  void post_send(int peer, const void* data, size_t bytes) override;
  void post_recv(int peer, void* data, size_t bytes) override;
  void wait_recv(int peer) override;
  void recv_reduce(int peer, const Reduction& into, size_t bytes) override;
  void wait_all() override;
  uint64_t recvs_completed(int peer) const override { return peers_[peer].recvs_done; }
  std::string describe_peer(int peer) const override;
  // The host identity (boot id and network namespace), else the host name.
  std::string host_of(int r) const override;

  // Records `reason` in the store as the group's first failure (if none is recorded yet) and
  // resets every connection, so peers blocked on this rank fail at once instead of waiting.
  void abort(const std::string& reason);

  const LocalInterface& local_interface() const { return interface_; }
  Link link(int peer) const;
  // "shm to 1, 2; tcp to 3": how this rank reaches its peers, for logs and headers.
  std::string describe_links() const;

 private:
  struct PendingIo {
    char* data;
    size_t left;
  };
  struct Peer {
    Socket socket;
    Endpoint endpoint;
    std::string hostname;
    std::string host_identity;            // see host_identity(); "-" when unknown
    std::string unix_name;                // its unix listener; "-" when it has none
    bool offers_shm = false;              // its RINGGRAD_TRANSPORT lets it share memory
    bool over_unix = false;               // this connection is a unix socket
    shm::ShmChannel* shm = nullptr;       // owned by shm_; it queues this peer's sends and receives
    std::vector<PendingIo> sends, recvs;  // FIFO (sockets); *_head is the oldest unfinished entry
    size_t send_head = 0, recv_head = 0;
    uint64_t recvs_posted = 0, recvs_waited = 0, recvs_done = 0;  // counts, for wait_recv
  };

  void connect_mesh(const SocketTransportOptions& options, const Socket& listener,
                    const Socket& unix_listener);
  Socket connect_to(int peer, bool unix_allowed, Clock::time_point deadline,
                    const std::string& what);
  void refuse_loopback_across_hosts() const;
  void connect_shared_memory(SameHostLink mode, Clock::time_point deadline);
  bool pending(int peer) const;    // sends or receives queued
  bool receiving(int peer) const;  // receives queued
  bool progress_peer(int peer);    // one non-blocking pass; true if bytes moved
  bool progress_socket(Peer& p, int peer);
  bool progress_all();
  void block_until_ready();  // poll() the peers with pending I/O (and the doorbell)
  template <class Done>
  void progress_until(Done done);  // moves I/O until done(); see kSpin
  [[noreturn]] void fail_peer(int peer, const std::string& what);
  std::string first_failure_note();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  LocalInterface interface_;
  std::vector<Peer> peers_;            // indexed by rank; peers_[rank()] unused
  std::unique_ptr<shm::ShmMesh> shm_;  // null: no shared memory with any peer
  bool all_shm_ = false;               // every peer is on shared memory (no socket to poll)
  OperationName operation_ = "setup";
  Clock::time_point deadline_;
  Clock::time_point begun_;
};

}  // namespace ringgrad::comm::net
