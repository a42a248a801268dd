// MeshTransport: a full mesh of links between the ranks of one process group, set up through
// the Store (each rank publishes "<prefix>addr/<rank>" = "ip:port hostname host-identity
// unix-name shm|-"; a higher rank connects to every lower one and a handshake checks run id,
// generation and both ranks), then driven on the calling thread (the group's worker).
// Every pair first gets a stream socket: TCP to a peer on another host, a unix socket to a peer
// on this host (same kernel and network namespace). Then each peer gets one Link (link.h): a
// net::SocketLink over that socket, or, for a peer on this host that shares memory, an
// shm::ShmLink. One progress loop moves the bytes of every link without knowing its kind
// (mesh_transport_progress.cpp); how it waits is wait_policy.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store/store.h"
#include "comm/transport/link.h"
#include "comm/transport/shm/shm_mesh.h"
#include "comm/transport/socket/socket.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm {

// What peers on this host are reached by (peers on other hosts always use TCP):
//   automatic    shared memory, else (it could not be set up) a unix socket, else TCP
//   shm          shared memory; a peer on this host without it is an error
//   unix_socket  a unix socket, else TCP
//   tcp          TCP
enum class SameHostLink { automatic, shm, unix_socket, tcp };

struct MeshTransportOptions {
  std::string run_id;      // must match on every rank (the handshake refuses strangers)
  int64_t generation = 0;  // a worker of another restart generation is refused
  Milliseconds setup_timeout{300'000};
  int socket_buffer_bytes = 4 << 20;
  std::optional<std::string> ifname;  // RINGGRAD_SOCKET_IFNAME
  std::string store_host;             // the store's host (MASTER_ADDR); "" for an in-process store
  SameHostLink same_host = SameHostLink::automatic;  // RINGGRAD_TRANSPORT
};

class MeshTransport : public Transport {
 public:
  // Blocks until every rank is connected or throws TimeoutError naming the missing ranks.
  // Throws InvalidArgument when a rank listens on loopback while the ranks span hosts.
  MeshTransport(std::shared_ptr<Store> store, std::string key_prefix, int rank, int size,
                const MeshTransportOptions& options);
  ~MeshTransport() override;

  void begin(OperationName operation, Clock::time_point deadline) override;
  void post_send(int peer, const void* data, size_t bytes) override;
  void post_recv(int peer, void* data, size_t bytes) override;
  void wait_recv(int peer) override;
  void recv_reduce(int peer, const Reduction& into, size_t bytes) override;
  void wait_all() override;
  uint64_t recvs_completed(int peer) const override { return peers_[peer].link->recvs_done(); }
  std::string describe_peer(int peer) const override;
  // The host identity (boot id and network namespace), else the host name.
  std::string host_of(int r) const override;

  // Records `reason` in the store as the group's first failure (if none is recorded yet) and
  // resets every link, so peers blocked on this rank fail at once instead of waiting.
  void abort(const std::string& reason);

  const net::LocalInterface& local_interface() const { return interface_; }
  LinkKind link_kind(int peer) const { return peers_[peer].link->kind(); }
  // "shm to 1,2; tcp to 3": how this rank reaches its peers, for logs and headers.
  std::string describe_links() const;

 private:
  struct Peer {
    net::Endpoint endpoint;
    std::string hostname;
    std::string host_identity;  // see host_identity(); "-" when unknown
    std::string unix_name;      // its unix listener; "-" when it has none
    bool offers_shm = false;    // its RINGGRAD_TRANSPORT lets it share memory
    net::Socket socket;         // during set-up; then the link's
    std::unique_ptr<Link> link;
    uint64_t recvs_posted = 0, recvs_waited = 0;  // counts, for wait_recv
  };

  void publish(const MeshTransportOptions& options, int port);
  void read_published(const MeshTransportOptions& options);
  void connect_mesh(const MeshTransportOptions& options, const net::Socket& listener,
                    const net::Socket& unix_listener);
  net::Socket connect_to(int peer, bool unix_allowed, Clock::time_point deadline,
                         const std::string& what);
  void refuse_loopback_across_hosts() const;
  void choose_links(SameHostLink mode, Clock::time_point deadline);
  bool progress_peer(int peer);  // one non-blocking pass; true if bytes moved
  bool progress_all();
  void block_until_ready();  // poll() the links with pending I/O (and their doorbell)
  [[noreturn]] void throw_timeout(const std::vector<int>& waiting);
  template <class Done>
  void progress_until(Done done);  // moves I/O until done(); wait_policy.h
  [[noreturn]] void fail_peer(int peer, const std::string& what);
  std::string first_failure_note();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  net::LocalInterface interface_;
  std::unique_ptr<shm::ShmMesh> shm_;  // null: no shared memory with any peer
  std::vector<Peer> peers_;            // indexed by rank; peers_[rank()] has no link
  bool passes_are_cheap_ = false;      // every link is (wait_policy.h)
  OperationName operation_ = "setup";
  Clock::time_point deadline_;
  Clock::time_point begun_;
};

}  // namespace ringgrad::comm
