// ShmMesh: the shared-memory channels of one rank to its peers on this host, which MeshTransport
// wraps in ShmLinks (shm_link.h) for those peers (their unix sockets stay for set-up and to
// notice a peer's death). Every rank owns an inbox segment: a header with its doorbell, then one
// ShmRing per same-host peer carrying the bytes that peer sends it. At set-up each pair swaps,
// over their unix socket, an offer: the inbox's memfd, the eventfd that wakes the rank, and the
// inbox slot meant for the peer, and the address of a random token in its memory: a peer that
// reads the token back with process_vm_readv may copy large messages straight out of this
// rank's buffers (shm_channel.h), and says so in a second round. A rank then pops from its own
// inbox and pushes into its peers'. Nothing is named, so no IPC namespace or /dev/shm is
// involved (shm_segment.h).
//
// Note [shm doorbell]: a rank that found nothing to move calls begin_sleep() (sets `sleeping` in
// its inbox header), makes one more pass over its rings, and only if that moves nothing either
// sleeps in poll() on fd() (the doorbell). A peer that moved bytes into or out of one of its rings
// calls wake_peer(), which writes the eventfd if `sleeping` is set. Each side puts a seq_cst
// fence between its store (flag, or head/tail) and its load (rings, or flag), so at least one
// sees the other: the sleeper finds the bytes, or the peer finds the flag. A spinning rank
// makes no system call, and a sleeping one costs its peers one write() per pass.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/transport/link.h"
#include "comm/transport/shm/shm_channel.h"
#include "comm/transport/shm/shm_ring.h"
#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/socket/socket.h"

namespace ringgrad::comm::shm {

// Bytes of each ring (one per direction and pair of ranks on a host).
constexpr size_t kShmRingBytes = 1 << 20;

struct ShmPeerLink {
  int peer;
  const net::Socket* socket;  // a connected unix socket to the peer (non-blocking)
};

class ShmMesh : public Doorbell {
 public:
  // Offers shared memory to every peer in `links` and takes up theirs; blocks until each has
  // answered or `deadline` passes (TimeoutError). A pair where either side could not make its
  // inbox gets no channel (it stays on the unix socket; the rank that failed warns, saying
  // needed vs available) unless `required`, where that throws IoError instead.
  ShmMesh(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes, bool required,
          Clock::time_point deadline);
  ShmMesh(const ShmMesh&) = delete;
  ShmMesh& operator=(const ShmMesh&) = delete;
  ~ShmMesh();

  ShmChannel* channel(int peer) const;  // nullptr: no shared memory with that peer
  bool empty() const { return channels_.empty(); }

  // Note [shm doorbell]. begin_sleep() before the last pass, end_sleep() after the poll().
  void begin_sleep() override;
  void end_sleep() override;
  int fd() const override { return doorbell_.get(); }

 private:
  struct Offer;
  struct Pairing;  // a peer that shares memory with this rank, while the channels are made
  void make_inbox(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes,
                  bool required);
  void send_offers(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes,
                   Clock::time_point deadline);
  std::vector<Pairing> read_offers(int rank, const std::vector<ShmPeerLink>& links,
                                   size_t ring_bytes, bool required, Clock::time_point deadline);
  void make_channels(int rank, std::vector<Pairing>& pairings, size_t ring_bytes,
                     Clock::time_point deadline);

  ShmSegment inbox_;
  std::atomic<uint32_t>* sleeping_ = nullptr;  // in inbox_'s header
  UniqueFd doorbell_;                          // an eventfd
  uint64_t probe_token_ = 0;                   // what a peer must read from our memory
  std::vector<ShmSegment> peer_inboxes_;
  std::vector<std::pair<int, std::unique_ptr<ShmChannel>>> channels_;  // by peer rank
};

}  // namespace ringgrad::comm::shm
