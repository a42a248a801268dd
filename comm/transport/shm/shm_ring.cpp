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

ShmRing::ShmRing(void* control, size_t capacity)
    : control_(static_cast<RingControl*>(control)),
      data_(static_cast<char*>(control) + sizeof(RingControl)),
      capacity_(capacity) {
  RG_CHECK(capacity > 0 && (capacity & (capacity - 1)) == 0, "ring capacity ", capacity,
           " is not a power of two");
}

size_t ShmRing::push(const void* data, size_t bytes) {
  auto* from = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    size_t room = capacity_ - (mine_ - theirs_);
    if (room == 0) {
      theirs_ = control_->tail.load(std::memory_order_acquire);
      room = capacity_ - (mine_ - theirs_);
      if (room == 0) break;
    }
    const size_t n = std::min({bytes - done, room, kPublishBytes});
    const size_t at = mine_ & (capacity_ - 1);
    const size_t first = std::min(n, capacity_ - at);  // up to the end of the ring, then wrap
    std::memcpy(data_ + at, from + done, first);
    std::memcpy(data_, from + done + first, n - first);
    mine_ += n;
    done += n;
    control_->head.store(mine_, std::memory_order_release);
  }
  return done;
}

size_t ShmRing::pop(void* data, size_t bytes) {
  auto* to = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    size_t ready = theirs_ - mine_;
    if (ready == 0) {
      theirs_ = control_->head.load(std::memory_order_acquire);
      ready = theirs_ - mine_;
      if (ready == 0) break;
    }
    const size_t n = std::min({bytes - done, ready, kPublishBytes});
    const size_t at = mine_ & (capacity_ - 1);
    const size_t first = std::min(n, capacity_ - at);
    std::memcpy(to + done, data_ + at, first);
    std::memcpy(to + done + first, data_, n - first);
    mine_ += n;
    done += n;
    control_->tail.store(mine_, std::memory_order_release);
  }
  return done;
}

size_t ShmRing::writable() {
  theirs_ = control_->tail.load(std::memory_order_acquire);
  return capacity_ - (mine_ - theirs_);
}

size_t ShmRing::readable() {
  theirs_ = control_->head.load(std::memory_order_acquire);
  return theirs_ - mine_;
}

void ShmRing::count_frame_copied() {
  control_->frames_copied.store(control_->frames_copied.load(std::memory_order_relaxed) + 1,
                                std::memory_order_release);
}

uint64_t ShmRing::frames_copied() const {
  return control_->frames_copied.load(std::memory_order_acquire);
}

}  // namespace ringgrad::comm::shm
