// ShmChannel: this rank's end of the shared-memory link with one peer on the host: its send and
// receive queues, framed onto two ShmRings (out: in the peer's inbox; in: in this rank's).
// Read shm_reference_channel.h first: this is the same channel (the same frames, the same byte
// stream), tuned, and tests/comm/test_shm_reference.cpp holds the two to the same bytes.
// Sends become frames: a FrameHeader, then either the bytes themselves (through the ring: two
// copies, one on each side; small sends queued together share one frame) or, for a large send
// when the peer may read this process's memory, nothing more: the receiver copies the bytes
// straight out of the sender's buffer with process_vm_readv (cross-memory attach, one copy, as
// Open MPI's vader does) and counts the frame in RingControl::frames_copied, which completes
// the send. Every frame starts on a cache line. Frames keep the byte-stream contract: a
// receive may take part of a frame, or parts of several. A reducing receive folds the bytes
// into its destination where they lie in the ring, or, from the sender's memory, a
// cache-sized piece at a time, so they cross memory once (docs/shared-memory.md).
// Single-threaded, non-blocking; the owner (ShmLink, in MeshTransport's loop) calls progress()
// and sleeps.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <vector>

#include "comm/transport/shm/shm_reference_channel.h"
#include "comm/transport/shm/shm_ring.h"
#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm::shm {

class ShmChannel {
 public:
  // `peer_pid`: the peer as this process sees it, or 0; `peer_reads_me`: the peer can read this
  // process's memory, so large sends may go as copy-from-me frames.
  ShmChannel(ShmRing out, ShmRing in, const std::atomic<uint32_t>* peer_sleeping,
             UniqueFd peer_doorbell, pid_t peer_pid, bool peer_reads_me);

  // As Transport::post_send/post_recv: the buffers stay valid until the operation completes.
  void post_send(const void* data, size_t bytes);
  void post_recv(void* data, size_t bytes);
  // A receive that folds into `into` (Transport::recv_reduce); `bytes` are whole elements.
  void post_recv_reduce(const Reduction& into, size_t bytes);
  // One non-blocking pass both ways; true if anything moved. Throws IoError when the peer's
  // memory cannot be read (it exited) or the peer aborted its group (abort()).
  bool progress();
  bool sending() const { return !sends_.empty(); }
  bool receiving() const { return !recvs_.empty(); }
  uint64_t recvs_done() const { return recvs_done_; }
  // The group aborted: drops everything queued and tells the peer that what this rank left in
  // the ring is void, so its next pass fails instead of completing a collective with it.
  void abort();
  // After a pass that moved bytes either way: rings the peer's doorbell if it sleeps.
  void wake_peer();

 private:
  struct Send {
    const char* data;
    size_t left;          // bytes not yet pushed into the ring (inline frames)
    uint64_t frame = 0;   // for a copy-from-me frame: its number, complete when copied
    bool framed = false;  // its header is in the ring
  };
  struct Recv {
    char* data;   // where the next bytes land; reducing: the next whole element of the result
    size_t left;  // bytes not yet received
    const char* local = nullptr;  // reducing: this rank's operand, in step with data; else null
    DType dtype = DType::u8;
    ReduceOp op = ReduceOp::sum;
    size_t carried = 0;          // reducing: bytes of an element split between two pieces...
    alignas(8) char carry[8]{};  // ...gathered here (no dtype is wider than 8 bytes)
  };
  size_t joinable();
  bool push_sends();
  bool pull_recvs();
  size_t receive(Recv& r, size_t bytes);  // up to `bytes` of the current frame; how many
  size_t fold(Recv& r, size_t bytes);     // the same, for a reducing receive
  static void fold_bytes(Recv& r, const char* from, size_t n);  // n received bytes into r
  size_t copy_from_peer(char* to, uint64_t from, size_t bytes);

  ShmRing out_;
  ShmRing in_;
  const std::atomic<uint32_t>* peer_sleeping_;
  UniqueFd peer_doorbell_;
  pid_t peer_pid_;
  bool peer_reads_me_;
  std::deque<Send> sends_;  // oldest first; the first `framed_` have their headers in the ring
  size_t framed_ = 0;
  uint64_t frames_sent_ = 0;
  std::deque<Recv> recvs_;
  std::vector<char> piece_;  // a piece of a copy-from-peer frame on its way into a reduction
  uint64_t recvs_done_ = 0;
  // The frame being received: bytes left, and for a copy-from-peer frame the peer's address.
  uint64_t frame_left_ = 0;
  uint64_t frame_address_ = 0;
  bool frame_in_place_ = false;
};

}  // namespace ringgrad::comm::shm
