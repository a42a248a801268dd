// ShmMesh: the inbox layout, the offer exchange over the unix sockets, and the doorbell.
#include "comm/transport/shm/shm_mesh.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm::shm {

namespace {

constexpr uint32_t kOfferMagic = 0x52475331;  // "RGS1"

// Inbox layout: this header (one cache line), `sleeping` (its own line: the peers read it on
// every pass, and only the owner writes it), then one slot per peer: RingControl + ring bytes.
struct InboxHeader {
  uint32_t magic;
  uint32_t slots;
  uint64_t ring_bytes;
};
constexpr size_t kSleepingOffset = kCacheLine;
constexpr size_t kSlotsOffset = 2 * kCacheLine;

size_t slot_bytes(size_t ring_bytes) { return sizeof(RingControl) + ring_bytes; }
size_t inbox_bytes(size_t slots, size_t ring_bytes) {
  return kSlotsOffset + slots * slot_bytes(ring_bytes);
}
void* slot_at(const ShmSegment& inbox, size_t slot, size_t ring_bytes) {
  return static_cast<char*>(inbox.data()) + kSlotsOffset + slot * slot_bytes(ring_bytes);
}

// The peer at the other end of a unix socket as this process sees it (0: in another pid
// namespace, or unknown), so that process_vm_readv reaches the right process.
pid_t peer_pid(const net::Socket& s) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(s.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
}

// Whether this process may read `pid`'s memory (ptrace rules, seccomp, pid namespaces): it reads
// the token the peer put at `address`, so a wrong process cannot pass by chance.
bool can_read_memory_of(pid_t pid, uint64_t address, uint64_t token) {
  if (pid <= 0) return false;
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(address), sizeof value};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof value && value == token;
}

std::string rank_list(const std::vector<ShmPeerLink>& links) {
  std::string out;
  for (const auto& l : links) out += (out.empty() ? "" : ", ") + std::to_string(l.peer);
  return out;
}

}  // namespace

// What each side of a pair sends the other; the memfd and the eventfd travel with it.
struct ShmMesh::Offer {
  uint32_t magic;
  uint32_t ok;  // 0: this rank has no inbox (it said why), the pair stays on the socket
  uint64_t inbox_bytes;
  uint64_t ring_bytes;
  uint32_t slot;  // the receiver's ring in the sender's inbox
  uint32_t unused;
  uint64_t probe_address;  // where the sender keeps probe_token
  uint64_t probe_token;
};

struct ShmMesh::Pairing {
  ShmPeerLink link;
  Offer offer;        // theirs
  UniqueFd doorbell;  // their eventfd
  size_t slot;        // their ring in this rank's inbox
};

// Four steps, each over every peer before the next, so that no rank waits on a read while the
// peer waits on one too: make this rank's inbox, offer it, read the peers' offers (mapping
// theirs), then tell each whether its memory can be read and make the channels.
ShmMesh::ShmMesh(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes, bool required,
                 Clock::time_point deadline) {
  make_inbox(rank, links, ring_bytes, required);
  send_offers(rank, links, ring_bytes, deadline);
  std::vector<Pairing> pairings = read_offers(rank, links, ring_bytes, required, deadline);
  make_channels(rank, pairings, ring_bytes, deadline);
  // The peers hold their own descriptors (or mappings) now; a mapping outlives its descriptor.
  inbox_.close_fd();
}

// An inbox with one ring per peer, and the eventfd that wakes this rank. Without them (no
// memory, say) every pair stays on its unix socket, unless shared memory is `required`.
void ShmMesh::make_inbox(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes,
                         bool required) {
  try {
    inbox_ = ShmSegment::create(inbox_bytes(links.size(), ring_bytes),
                                "ringgrad-inbox-rank" + std::to_string(rank));
    doorbell_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!doorbell_.valid()) RG_THROW(IoError, "eventfd failed: ", std::strerror(errno));
  } catch (const IoError& e) {
    const std::string why = str_cat("shared memory for the ", links.size(), " ranks on this host (",
                                    rank_list(links), "): ", user_message(e));
    if (required) RG_THROW(IoError, "RINGGRAD_TRANSPORT=shm on rank ", rank, ": ", why);
    log_warn("ring transport: rank ", rank, ": no ", why, "; they use unix sockets instead");
    inbox_ = ShmSegment();
    return;
  }
  auto* header = static_cast<InboxHeader*>(inbox_.data());
  *header = {kOfferMagic, static_cast<uint32_t>(links.size()), ring_bytes};
  sleeping_ =
      reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(inbox_.data()) + kSleepingOffset);
}

// Every offer goes out before any is read: each is a few bytes, so no send waits on a read.
void ShmMesh::send_offers(int rank, const std::vector<ShmPeerLink>& links, size_t ring_bytes,
                          Clock::time_point deadline) {
  const bool ok = inbox_.data() != nullptr;
  probe_token_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^
                 static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  for (size_t slot = 0; slot < links.size(); ++slot) {
    const Offer mine{kOfferMagic,
                     ok ? 1u : 0u,
                     inbox_bytes(links.size(), ring_bytes),
                     ring_bytes,
                     static_cast<uint32_t>(slot),
                     0,
                     reinterpret_cast<uint64_t>(&probe_token_),
                     probe_token_};
    const std::string what =
        str_cat("rank ", rank, " offering shared memory to rank ", links[slot].peer);
    if (ok)
      net::write_with_fds(*links[slot].socket, &mine, sizeof mine,
                          {inbox_.fd().get(), doorbell_.get()}, deadline, what);
    else
      net::write_fully(*links[slot].socket, &mine, sizeof mine, deadline, what);
  }
}

// The peers' offers; those where both sides made an inbox pair up, and theirs is mapped.
std::vector<ShmMesh::Pairing> ShmMesh::read_offers(int rank, const std::vector<ShmPeerLink>& links,
                                                   size_t ring_bytes, bool required,
                                                   Clock::time_point deadline) {
  const bool ok = inbox_.data() != nullptr;
  std::vector<Pairing> pairings;
  for (size_t slot = 0; slot < links.size(); ++slot) {
    const int peer = links[slot].peer;
    Offer theirs{};
    const std::string what =
        str_cat("rank ", rank, " reading the shared-memory offer of rank ", peer);
    std::vector<UniqueFd> fds =
        net::read_with_fds(*links[slot].socket, &theirs, sizeof theirs, 2, deadline, what);
    if (theirs.magic != kOfferMagic || theirs.ring_bytes != ring_bytes ||
        (theirs.ok &&
         (fds.size() != 2 || theirs.inbox_bytes < inbox_bytes(theirs.slot + 1, ring_bytes))))
      RG_THROW(IoError, what, ": a malformed offer (another ringgrad version?)");
    if (!ok || !theirs.ok) {
      if (required && ok)
        RG_THROW(IoError, "RINGGRAD_TRANSPORT=shm on rank ", rank, ": rank ", peer,
                 " could not make its shared memory (its log says why)");
      continue;
    }
    peer_inboxes_.push_back(ShmSegment::map(fds[0], theirs.inbox_bytes));
    pairings.push_back({links[slot], theirs, std::move(fds[1]), slot});
  }
  return pairings;
}

// Second round: each side tells the other whether it can read its memory (so may take large
// sends straight from it); then each pair's channel joins the ring in the peer's inbox (out)
// with the one in this rank's (in).
void ShmMesh::make_channels(int rank, std::vector<Pairing>& pairings, size_t ring_bytes,
                            Clock::time_point deadline) {
  std::vector<pid_t> pids;
  for (const Pairing& p : pairings) {
    pids.push_back(peer_pid(*p.link.socket));
    const char can_read =
        can_read_memory_of(pids.back(), p.offer.probe_address, p.offer.probe_token) ? 1 : 0;
    net::write_fully(*p.link.socket, &can_read, 1, deadline,
                     str_cat("rank ", rank, " answering the offer of rank ", p.link.peer));
  }
  for (size_t i = 0; i < pairings.size(); ++i) {
    Pairing& p = pairings[i];
    char reads_me = 0;
    net::read_fully(*p.link.socket, &reads_me, 1, deadline,
                    str_cat("rank ", rank, " reading the answer of rank ", p.link.peer));
    const ShmSegment& theirs_inbox = peer_inboxes_[i];
    auto* peer_sleeping = reinterpret_cast<const std::atomic<uint32_t>*>(
        static_cast<const char*>(theirs_inbox.data()) + kSleepingOffset);
    channels_.emplace_back(
        p.link.peer,
        std::make_unique<ShmChannel>(
            ShmRing(slot_at(theirs_inbox, p.offer.slot, ring_bytes), ring_bytes,
                    ShmRing::End::producer),
            ShmRing(slot_at(inbox_, p.slot, ring_bytes), ring_bytes, ShmRing::End::consumer),
            peer_sleeping, std::move(p.doorbell), pids[i], reads_me == 1));
  }
}

ShmMesh::~ShmMesh() = default;

ShmChannel* ShmMesh::channel(int peer) const {
  for (const auto& [rank, channel] : channels_)
    if (rank == peer) return channel.get();
  return nullptr;
}

void ShmMesh::begin_sleep() {
  sleeping_->store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // Note [shm doorbell]
}

void ShmMesh::end_sleep() {
  sleeping_->store(0, std::memory_order_relaxed);
  uint64_t count = 0;
  [[maybe_unused]] ssize_t rc =
      ::read(doorbell_.get(), &count, sizeof count);  // reset; EAGAIN is fine
}

}  // namespace ringgrad::comm::shm
