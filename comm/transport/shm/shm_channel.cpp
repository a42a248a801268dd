// ShmChannel: framing sends onto the ring, and reading frames back, in place or from the peer.
#include "comm/transport/shm/shm_channel.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "comm/reduce_ops/reduce_kernels.h"
#include "core/error.h"

namespace ringgrad::comm::shm {

namespace {

// Sends at least this large go as copy-from-me frames when the peer can read our memory: one
// copy instead of two, and no need for both ranks to run at once (docs/measurements.md).
// Below it the system call costs more than the copy it saves.
constexpr size_t kCopyFromSenderBytes = 64 << 10;
// Sends up to this size queued one after another may share a frame (ShmChannel::joinable).
constexpr size_t kJoinBytes = 4 << 10;
// A reducing receive copies a copy-from-peer frame in pieces this large and folds each while
// it is in the core's L2 cache (1 MiB here, next to the piece of `local` and of the result).
// Smaller pieces pay the per-piece cost too often; the measured best is in docs/measurements.md.
constexpr size_t kFoldPieceBytes = 128 << 10;

// Whether the kernel can read `data` on a peer's behalf: memory mapped from a device (CUDA's
// pinned staging slots may be) refuses process_vm_readv, so such a send goes through the ring.
// One byte of our own memory, one system call: small next to the 64 KiB copy it decides.
bool kernel_can_read(const char* data) {
  char byte;
  iovec local{&byte, 1};
  iovec remote{const_cast<char*>(data), 1};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == 1;
}

}  // namespace

ShmChannel::ShmChannel(ShmRing out, ShmRing in, const std::atomic<uint32_t>* peer_sleeping,
                       UniqueFd peer_doorbell, pid_t peer_pid, bool peer_reads_me)
    : out_(out),
      in_(in),
      peer_sleeping_(peer_sleeping),
      peer_doorbell_(std::move(peer_doorbell)),
      peer_pid_(peer_pid),
      peer_reads_me_(peer_reads_me) {}

void ShmChannel::post_send(const void* data, size_t bytes) {
  sends_.push_back({static_cast<const char*>(data), bytes});
}

void ShmChannel::post_recv(void* data, size_t bytes) {
  recvs_.push_back({static_cast<char*>(data), bytes});
}

void ShmChannel::post_recv_reduce(const Reduction& into, size_t bytes) {
  RG_CHECK(bytes % dtype_size(into.dtype) == 0, "recv_reduce of ", bytes,
           " bytes: not whole elements of ", dtype_size(into.dtype), " bytes");
  Recv r{static_cast<char*>(into.dst), bytes, static_cast<const char*>(into.local)};
  r.dtype = into.dtype;
  r.op = into.op;
  recvs_.push_back(r);
}

// Each direction publishes once, as soon as its part of the pass is done: the peer then sees a
// whole batch of frames at one look, and our sends are visible while we copy its bytes out.
bool ShmChannel::progress() {
  if (in_.producer_aborted())
    RG_THROW(IoError, "it aborted its process group after a failure, so what it sent is void");
  const bool pushed = push_sends();
  if (pushed) out_.publish();
  const bool pulled = pull_recvs();
  if (pulled) in_.publish();
  if (pushed || pulled) wake_peer();
  return pushed || pulled;
}

// How many queued sends, from the first unframed one on, go as one frame: consecutive small
// sends that fit in the ring whole, now. The receiver sees a byte stream, so a fingerprint and
// the 8 bytes after it can be one frame, and so one cache line for the peer to fetch.
size_t ShmChannel::joinable() {
  size_t bytes = 0, k = framed_;
  for (; k < sends_.size(); ++k) {
    const size_t next = sends_[k].left;
    if (next > kJoinBytes || !out_.can_move(sizeof(FrameHeader) + bytes + next)) break;
    bytes += next;
  }
  return k - framed_;
}

// Frames every queued send that fits, then retires the oldest ones that are complete. Every
// frame starts on a cache line of its own.
bool ShmChannel::push_sends() {
  bool moved = false;
  for (; framed_ < sends_.size(); ++framed_) {
    Send& s = sends_[framed_];
    if (!s.framed) {
      if (!out_.align_for(sizeof(FrameHeader))) break;
      const bool from_me =
          peer_reads_me_ && s.left >= kCopyFromSenderBytes && kernel_can_read(s.data);
      const size_t joined = from_me ? 1 : std::max<size_t>(1, joinable());
      FrameHeader header{0, from_me ? reinterpret_cast<uint64_t>(s.data) : 0};
      for (size_t k = 0; k < joined; ++k) header.bytes += sends_[framed_ + k].left;
      out_.write(&header, sizeof header);
      s.framed = moved = true;
      if (from_me) {
        s.frame = ++frames_sent_;
        s.left = 0;
      }
      for (size_t k = 0; joined > 1 && k < joined; ++k) {  // all fit: joinable() checked
        Send& j = sends_[framed_ + k];
        out_.write(j.data, j.left);
        j.data += j.left;
        j.left = 0;
        j.framed = true;
      }
      framed_ += joined - 1;  // `s` is done too then; the last joined one is the current entry
    }
    const size_t n = out_.write(s.data, s.left);
    s.data += n;
    s.left -= n;
    moved |= n > 0;
    if (s.left > 0) break;  // the ring is full
  }
  const uint64_t copied = frames_sent_ ? out_.frames_copied() : 0;
  while (!sends_.empty() && framed_ > 0 && sends_.front().left == 0 &&
         sends_.front().frame <= copied) {
    sends_.pop_front();
    --framed_;
    moved = true;
  }
  return moved;
}

// Fills the posted receives from the frames in the ring, in order.
bool ShmChannel::pull_recvs() {
  bool moved = false;
  while (!recvs_.empty()) {
    Recv& r = recvs_.front();
    if (r.left == 0) {
      recvs_.pop_front();
      ++recvs_done_;
      continue;
    }
    if (frame_left_ == 0) {
      if (!in_.align_for(sizeof(FrameHeader))) break;
      FrameHeader header{};
      in_.read(&header, sizeof header);
      frame_left_ = header.bytes;
      frame_address_ = header.address;
      frame_in_place_ = header.address != 0;
      moved = true;  // its room is free (published at the end of the pass)
      continue;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(r.left, frame_left_));
    const size_t n = r.local ? fold(r, want) : receive(r, want);
    if (n == 0) break;  // the ring is empty
    frame_left_ -= n;
    frame_address_ += n;
    moved = true;
    if (frame_in_place_ && frame_left_ == 0) {
      in_.count_frame_copied();
      frame_in_place_ = false;
    }
  }
  return moved;
}

size_t ShmChannel::receive(Recv& r, size_t bytes) {
  const size_t n =
      frame_in_place_ ? copy_from_peer(r.data, frame_address_, bytes) : in_.read(r.data, bytes);
  r.data += n;
  r.left -= n;
  return n;
}

// Whole elements straight from `from`; an element split between two pieces (at the ring's
// wrap, say) is gathered in r.carry first.
void ShmChannel::fold_bytes(Recv& r, const char* from, size_t n) {
  const size_t elem = dtype_size(r.dtype);
  auto fold_elements = [&](const char* received, size_t elements) {
    // reduce_into reads whole elements where they lie, which must then be aligned for their
    // type; elements that follow an odd-sized send in the stream go through a small aligned
    // buffer instead (the collectives' own sends are whole elements, so rarely).
    alignas(64) char aligned[4096];
    while (elements > 0) {
      const bool misaligned = reinterpret_cast<uintptr_t>(received) % elem != 0;
      const size_t k = misaligned ? std::min(elements, sizeof aligned / elem) : elements;
      const char* operand = received;
      if (misaligned) operand = static_cast<const char*>(std::memcpy(aligned, received, k * elem));
      reduce_into(r.data, r.local, operand, k, r.dtype, r.op);
      r.data += k * elem;
      r.local += k * elem;
      received += k * elem;
      elements -= k;
    }
  };
  r.left -= n;
  if (r.carried > 0) {
    const size_t take = std::min(n, elem - r.carried);
    std::memcpy(r.carry + r.carried, from, take);
    r.carried += take;
    from += take;
    n -= take;
    if (r.carried < elem) return;
    fold_elements(r.carry, 1);
    r.carried = 0;
  }
  fold_elements(from, n / elem);
  r.carried = n % elem;
  std::memcpy(r.carry, from + n - r.carried, r.carried);
}

// Reduces from where the bytes lie: in the ring, or, for a copy-from-peer frame, from a piece
// just copied out of the peer, still in this core's cache.
size_t ShmChannel::fold(Recv& r, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    if (frame_in_place_) {
      if (piece_.empty()) piece_.resize(kFoldPieceBytes);
      const size_t n = copy_from_peer(piece_.data(), frame_address_ + done,
                                      std::min(bytes - done, kFoldPieceBytes));
      fold_bytes(r, piece_.data(), n);
      done += n;
      continue;
    }
    const ShmRing::Span span = in_.readable(bytes - done);
    if (span.bytes == 0) break;  // the ring is empty
    fold_bytes(r, span.data, span.bytes);
    in_.consume(span.bytes);
    done += span.bytes;
  }
  return done;
}

size_t ShmChannel::copy_from_peer(char* to, uint64_t from, size_t bytes) {
  if (bytes == 0) return 0;
  iovec local{to, bytes};
  iovec remote{reinterpret_cast<void*>(from), bytes};
  const ssize_t n = ::process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0);
  if (n <= 0)
    RG_THROW(IoError, "reading ", bytes, " bytes from the peer's memory (process ", peer_pid_,
             ") failed: ", n < 0 ? std::strerror(errno) : "nothing read");
  return static_cast<size_t>(n);
}

void ShmChannel::abort() {
  sends_.clear();
  recvs_.clear();
  framed_ = 0;
  out_.mark_aborted();
  wake_peer();
}

void ShmChannel::wake_peer() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // Note [shm doorbell]
  if (peer_sleeping_->load(std::memory_order_relaxed) == 0) return;
  const uint64_t one = 1;
  // A full counter (EAGAIN) still wakes the sleeper, so the result does not matter.
  [[maybe_unused]] ssize_t rc = ::write(peer_doorbell_.get(), &one, sizeof one);
}

}  // namespace ringgrad::comm::shm
