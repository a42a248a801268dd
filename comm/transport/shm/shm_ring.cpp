// ShmRing: copies in and out of the shared ring, publishing progress in chunks so that the
// other side starts on the first chunk while this side copies the next.
#include "comm/transport/shm/shm_ring.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace ringgrad::comm::shm {

namespace {

// Bytes copied before head or tail is published. A whole ring's worth at once would leave the
// other side idle for the length of the copy; a few cache lines at a time would make it
// re-read the shared counter far too often.
constexpr size_t kPublishBytes = 64 << 10;

}  // namespace

ShmRing::ShmRing(void* control, size_t capacity, End end)
    : control_(static_cast<RingControl*>(control)),
      data_(static_cast<char*>(control) + sizeof(RingControl)),
      capacity_(capacity),
      end_(end) {
  RG_CHECK(capacity > 0 && (capacity & (capacity - 1)) == 0, "ring capacity ", capacity,
           " is not a power of two");
}

size_t ShmRing::push(const void* data, size_t bytes) {
  RG_CHECK(end_ == End::producer, "push on the consumer end of a ring");
  const size_t n = transfer(static_cast<char*>(const_cast<void*>(data)), bytes);
  publish();
  return n;
}

size_t ShmRing::pop(void* data, size_t bytes) {
  RG_CHECK(end_ == End::consumer, "pop on the producer end of a ring");
  const size_t n = transfer(static_cast<char*>(data), bytes);
  publish();
  return n;
}

size_t ShmRing::write(const void* data, size_t bytes) {
  RG_CHECK(end_ == End::producer, "write on the consumer end of a ring");
  return transfer(static_cast<char*>(const_cast<void*>(data)), bytes);
}

size_t ShmRing::read(void* data, size_t bytes) {
  RG_CHECK(end_ == End::consumer, "read on the producer end of a ring");
  return transfer(static_cast<char*>(data), bytes);
}

size_t ShmRing::transfer(char* outside, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    size_t available = room_or_data();
    if (available == 0) {
      publish();  // the other end may be waiting for what this one moved so far
      look();
      available = room_or_data();
      if (available == 0) break;
    }
    const size_t n = std::min({bytes - done, available, kPublishBytes});
    const size_t at = mine_ & (capacity_ - 1);
    const size_t first = std::min(n, capacity_ - at);  // up to the end of the ring, then wrap
    if (end_ == End::producer) {
      std::memcpy(data_ + at, outside + done, first);
      std::memcpy(data_, outside + done + first, n - first);
    } else {
      std::memcpy(outside + done, data_ + at, first);
      std::memcpy(outside + done + first, data_, n - first);
    }
    mine_ += n;
    done += n;
    if (mine_ - published_ >= kPublishBytes) publish();
  }
  return done;
}

ShmRing::Span ShmRing::readable(size_t most) {
  RG_CHECK(end_ == End::consumer, "readable on the producer end of a ring");
  if (room_or_data() == 0) {
    publish();  // the producer may be waiting for the room read so far
    look();
  }
  const size_t at = mine_ & (capacity_ - 1);
  const size_t n = std::min({most, room_or_data(), capacity_ - at, kPublishBytes});
  return {n ? data_ + at : nullptr, n};
}

void ShmRing::consume(size_t bytes) {
  mine_ += bytes;
  if (mine_ - published_ >= kPublishBytes) publish();
}

void ShmRing::publish() {
  if (published_ == mine_) return;
  published_ = mine_;
  (end_ == End::producer ? control_->head : control_->tail).store(mine_, std::memory_order_release);
}

void ShmRing::look() {
  theirs_ =
      (end_ == End::producer ? control_->tail : control_->head).load(std::memory_order_acquire);
}

bool ShmRing::can_move(size_t bytes) {
  if (room_or_data() < bytes) look();
  return room_or_data() >= bytes;
}

bool ShmRing::align_for(size_t bytes) {
  const size_t padding = static_cast<size_t>(0 - mine_) & (kCacheLine - 1);
  if (!can_move(padding + bytes)) return false;
  mine_ += padding;
  return true;
}

void ShmRing::count_frame_copied() {
  control_->frames_copied.store(control_->frames_copied.load(std::memory_order_relaxed) + 1,
                                std::memory_order_release);
}

uint64_t ShmRing::frames_copied() const {
  return control_->frames_copied.load(std::memory_order_acquire);
}

void ShmRing::mark_aborted() { control_->producer_aborted.store(1, std::memory_order_release); }

bool ShmRing::producer_aborted() const {
  return control_->producer_aborted.load(std::memory_order_acquire) != 0;
}

}  // namespace ringgrad::comm::shm
