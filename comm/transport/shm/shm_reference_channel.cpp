// ShmReferenceChannel: one frame per send, copied in and out of the rings.
#include "comm/transport/shm/shm_reference_channel.h"

#include <algorithm>

#include "comm/reduce_ops/reduce_kernels.h"
#include "core/error.h"

namespace ringgrad::comm::shm {

void ShmReferenceChannel::post_send(const void* data, size_t bytes) {
  sends_.push_back({static_cast<const char*>(data), bytes});
}

void ShmReferenceChannel::post_recv(void* data, size_t bytes) {
  recvs_.push_back({static_cast<char*>(data), bytes});
}

void ShmReferenceChannel::post_recv_reduce(const Reduction& into, size_t bytes) {
  RG_CHECK(bytes % dtype_size(into.dtype) == 0, "recv_reduce of ", bytes,
           " bytes: not whole elements of ", dtype_size(into.dtype), " bytes");
  recvs_.push_back({nullptr, bytes, std::vector<char>(bytes), into});
  recvs_.back().data = recvs_.back().landed.data();  // a deque's elements never move
}

bool ShmReferenceChannel::progress() {
  const bool pushed = push_sends();
  const bool pulled = pull_recvs();
  return pushed || pulled;
}

// The oldest send: its header once there is room for it, then as many bytes as fit.
bool ShmReferenceChannel::push_sends() {
  bool moved = false;
  while (!sends_.empty()) {
    Send& s = sends_.front();
    if (!s.framed) {
      if (!out_.align_for(sizeof(FrameHeader))) break;
      const FrameHeader header{s.left, 0};
      out_.push(&header, sizeof header);
      s.framed = true;
      moved = true;
    }
    const size_t n = out_.push(s.data, s.left);
    s.data += n;
    s.left -= n;
    moved = moved || n > 0;
    if (s.left > 0) break;  // the ring is full
    sends_.pop_front();
  }
  return moved;
}

// The oldest receive: from the current frame, reading the next header when it is used up.
bool ShmReferenceChannel::pull_recvs() {
  bool moved = false;
  while (!recvs_.empty()) {
    Recv& r = recvs_.front();
    if (r.left == 0) {
      complete(r);
      recvs_.pop_front();
      ++recvs_done_;
      continue;
    }
    if (frame_left_ == 0) {
      if (!in_.align_for(sizeof(FrameHeader))) break;
      FrameHeader header{};
      in_.pop(&header, sizeof header);
      RG_CHECK(header.address == 0, "a frame to copy from the sender's memory (", header.bytes,
               " bytes): the reference channel reads only frames in the ring");
      frame_left_ = header.bytes;
      moved = true;
      continue;
    }
    const size_t n = in_.pop(r.data, static_cast<size_t>(std::min<uint64_t>(r.left, frame_left_)));
    if (n == 0) break;  // the ring is empty
    r.data += n;
    r.left -= n;
    frame_left_ -= n;
    moved = true;
  }
  return moved;
}

void ShmReferenceChannel::complete(Recv& r) {
  if (r.landed.empty()) return;
  reduce_into(r.into.dst, r.into.local, r.landed.data(), r.landed.size() / dtype_size(r.into.dtype),
              r.into.dtype, r.into.op);
}

}  // namespace ringgrad::comm::shm
