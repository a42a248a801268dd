// ShmRing: one end of a single-producer, single-consumer byte ring in memory that two ranks
// share (comm/transport/shm/shm_mesh.h places the rings). The producer copies bytes in, the
// consumer copies them out in the same order; neither takes a lock or makes a system call.
// Layout: a RingControl, then `capacity` data bytes (a power of two). head counts the bytes
// ever pushed and only the producer writes it; tail counts the bytes ever popped and only the
// consumer writes it; each has its own cache line, so the two cores never write one line.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ringgrad::comm::shm {

constexpr size_t kCacheLine = 64;

struct RingControl {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // bytes pushed since the ring was made
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // bytes popped since the ring was made
  // For the channel above (shm_channel.h): frames the consumer copied straight from the
  // producer's memory, which completes the producer's sends. Only the consumer writes it.
  alignas(kCacheLine) std::atomic<uint64_t> frames_copied;
  // Set once by the producer when its group aborts: whatever it left in the ring belongs to a
  // failed collective, and the consumer must fail too rather than complete with it. Read on
  // every pass of the consumer; nobody writes the line otherwise, so that read stays cheap.
  alignas(kCacheLine) std::atomic<uint32_t> producer_aborted;
};
static_assert(sizeof(RingControl) == 4 * kCacheLine, "counters on separate cache lines");
// Another process sees the same bytes: the atomics must not hide a lock inside this process.
static_assert(std::atomic<uint64_t>::is_always_lock_free, "lock-free 64-bit atomics");

// A view of one end; the memory belongs to a shared segment. Not thread-safe: one producer
// end and one consumer end, each used by one thread.
class ShmRing {
 public:
  enum class End { producer, consumer };
  ShmRing() = default;
  // `control` is a zero-filled RingControl followed by `capacity` bytes.
  ShmRing(void* control, size_t capacity, End end);

  // Producer: copies as many of `bytes` as there is room for and publishes them; returns how many.
  size_t push(const void* data, size_t bytes);
  // Consumer: copies up to `bytes` of what the producer pushed and frees their room; returns how
  // many.
  size_t pop(void* data, size_t bytes);
  // As push and pop, but what fits in one publishing chunk is left unpublished until publish():
  // several small pieces (a frame header, a fingerprint, a payload) then cost the other side
  // one look at the shared counter instead of one per piece, and one cache-line transfer.
  size_t write(const void* data, size_t bytes);
  size_t read(void* data, size_t bytes);
  void publish();  // makes what write/read moved visible to the other end
  // Consumer, reading in place: where up to `most` ready bytes lie contiguously (up to the end
  // of the ring, or kPublishBytes), and how many; {nullptr, 0} when none are ready. They stay
  // put until consume(n) frees n of them, so the caller may reduce straight from the ring.
  struct Span {
    const char* data;
    size_t bytes;
  };
  Span readable(size_t most);
  void consume(size_t bytes);

  // Producer: whether `bytes` fit now. Consumer: whether `bytes` are ready now. Looks at the
  // other end's counter only when its last look says no.
  bool can_move(size_t bytes);
  // Skips to the next cache-line boundary if `bytes` can be moved from there now (both ends
  // skip alike, so the padding is never read); false, staying put, if not. A frame that starts
  // on a line of its own costs the consumer one line fewer when it is small.
  bool align_for(size_t bytes);
  // Consumer: counts one frame copied; producer: how many were (see RingControl).
  void count_frame_copied();
  uint64_t frames_copied() const;
  // Producer: marks the ring's contents void (the group aborted). Consumer: whether it did.
  void mark_aborted();
  bool producer_aborted() const;

  size_t capacity() const { return capacity_; }

 private:
  // Copies up to `bytes` between `outside` and the ring, in the direction of this end.
  size_t transfer(char* outside, size_t bytes);
  size_t room_or_data() const {  // as this end last saw the other's counter
    return end_ == End::producer ? capacity_ - (mine_ - theirs_) : theirs_ - mine_;
  }
  void look();  // rereads the other end's counter

  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  size_t capacity_ = 0;
  End end_ = End::producer;
  // This end's counter and its last look at the other end's (so a pass that finds enough room
  // or data does not touch the other side's cache line).
  uint64_t mine_ = 0;
  uint64_t theirs_ = 0;
  uint64_t published_ = 0;  // mine_ as the other end last saw it
};

}  // namespace ringgrad::comm::shm
