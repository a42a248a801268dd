// ShmReferenceChannel: the plain version of a shared-memory channel, to read before
// shm_channel.h and for the tests to hold ShmChannel to (as kernels/cpu/conv2d_reference.cpp
// holds the convolutions). One end of a pair: sends go into `out` (a ring in the peer's inbox),
// receives come from `in` (one in this rank's). Each send is one frame: a FrameHeader on a
// cache line of its own, then the bytes, pushed as the ring makes room. A receive takes the
// next bytes of the stream, whatever frames they came in. A reducing receive lands its bytes and
// then reduces them. No joined frames, no copy from the sender's memory, no fold in the ring:
// those are ShmChannel's, and the frames here are the same, so either channel reads the other's.
// Single-threaded and non-blocking, as ShmChannel; no doorbell and no abort (the tests poll).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "comm/transport/shm/shm_ring.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm::shm {

// What starts every frame: how many bytes it carries, and where they are. address 0: they
// follow in the ring; else (ShmChannel only) the receiver copies them from that address in the
// sender's memory.
struct FrameHeader {
  uint64_t bytes;
  uint64_t address;
};

class ShmReferenceChannel {
 public:
  ShmReferenceChannel(ShmRing out, ShmRing in) : out_(out), in_(in) {}

  void post_send(const void* data, size_t bytes);
  void post_recv(void* data, size_t bytes);
  void post_recv_reduce(const Reduction& into, size_t bytes);
  bool progress();  // one pass both ways; true if anything moved
  bool sending() const { return !sends_.empty(); }
  bool receiving() const { return !recvs_.empty(); }
  uint64_t recvs_done() const { return recvs_done_; }

 private:
  struct Send {
    const char* data;
    size_t left;
    bool framed = false;  // its header is in the ring
  };
  struct Recv {
    char* data;
    size_t left;
    std::vector<char> landed{};  // a reducing receive's bytes, reduced when all came
    Reduction into{};
  };
  bool push_sends();
  bool pull_recvs();
  void complete(Recv& r);

  ShmRing out_;
  ShmRing in_;
  std::deque<Send> sends_;
  std::deque<Recv> recvs_;
  uint64_t recvs_done_ = 0;
  uint64_t frame_left_ = 0;  // bytes of the frame being received not yet taken
};

}  // namespace ringgrad::comm::shm
