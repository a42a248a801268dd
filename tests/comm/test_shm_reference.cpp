// The tuned shared-memory channel (ShmChannel: joined frames, copies from the sender's memory,
// folds in the ring) held to the reference one (ShmReferenceChannel: one frame per send): for
// the same sends and receives, plain and reducing, both deliver the same bytes, and each reads
// the other's frames. Sizes sit around the join limit (4 KiB), the copy-from-sender threshold
// (64 KiB) and the ring (16 KiB here, so frames wrap and outgrow it), and receives cut the
// stream elsewhere than the sends do.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "comm/reduce_ops/reduce_kernels.h"
#include "comm/transport/shm/shm_channel.h"
#include "comm/transport/shm/shm_reference_channel.h"
#include "comm/transport/shm/shm_segment.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::shm;

namespace {

constexpr size_t kRing = 16 << 10;

// Two rings in one segment: `ab` from the sender to the receiver, `ba` back (the channels
// need both ends; nothing travels back here).
struct Rings {
  ShmSegment segment = ShmSegment::create(2 * (sizeof(RingControl) + kRing), "test-reference");
  void* at(int i) { return static_cast<char*>(segment.data()) + i * (sizeof(RingControl) + kRing); }
  ShmRing ab_out{at(0), kRing, ShmRing::End::producer};
  ShmRing ab_in{at(0), kRing, ShmRing::End::consumer};
  ShmRing ba_out{at(1), kRing, ShmRing::End::producer};
  ShmRing ba_in{at(1), kRing, ShmRing::End::consumer};
};

struct Receive {
  size_t bytes;
  DType dtype;  // u8 with reduce false: a plain receive
  bool reduce;
};

struct Script {
  std::vector<size_t> sends;
  std::vector<Receive> recvs;  // as many bytes in all as the sends
};

// Fixed sizes at each limit, then random ones; receives cut the same stream at other places,
// some of them reducing (f32, bf16 or i64). A reducing receive starts where its elements are
// aligned in the receiver's buffer, as a tensor's are (a short plain receive first if need be),
// while the bytes it reads may follow an odd-sized send, unaligned in the ring.
Script make_script(uint32_t seed) {
  Script s;
  s.sends = {1,     8,     32,    7,     4095, 4096,   4097, 3,      3,    3,    kRing - 1,
             kRing, 65535, 65536, 65537, 12,   100000, 5,    200000, 4096, 4096, 1};
  std::mt19937 random(seed);
  for (int i = 0; i < 40; ++i) {
    const uint32_t kind = random() % 3;
    s.sends.push_back(kind == 0   ? 1 + random() % 64
                      : kind == 1 ? 1 + random() % 8192
                                  : 60000 + random() % 140000);
  }
  size_t left = 0, at = 0;
  for (size_t n : s.sends) left += n;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::i64};
  while (left > 0) {
    const bool reduce = random() % 2 == 0;
    const DType dtype = reduce ? dtypes[random() % 3] : DType::u8;
    const size_t misaligned = at % dtype_size(dtype);
    if (misaligned != 0) {
      const size_t pad = std::min(left, dtype_size(dtype) - misaligned);
      s.recvs.push_back({pad, DType::u8, false});
      left -= pad;
      at += pad;
      continue;
    }
    size_t n = std::min<size_t>(left, 1 + random() % (random() % 2 ? 100 : 150000));
    n -= n % dtype_size(dtype);
    if (n == 0) continue;
    s.recvs.push_back({n, dtype, reduce});
    left -= n;
    at += n;
  }
  return s;
}

std::vector<char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<char> bytes(n);
  for (char& b : bytes) b = static_cast<char>(random());
  return bytes;
}

// What the receiver's buffer must hold: the stream, or this rank's `local` folded with it.
std::vector<char> expected(const Script& s, const std::vector<char>& stream,
                           const std::vector<char>& local) {
  std::vector<char> want(stream);
  size_t at = 0;
  for (const Receive& r : s.recvs) {
    if (r.reduce)
      reduce_into(want.data() + at, local.data() + at, stream.data() + at,
                  r.bytes / dtype_size(r.dtype), r.dtype, ReduceOp::sum);
    at += r.bytes;
  }
  return want;
}

// Posts the script's sends on `sender` and receives on `receiver`, `batch` at a time between
// passes (so the sender sees several queued, or few), and passes both until all is done.
template <class Sender, class Receiver>
std::vector<char> deliver(Sender& sender, Receiver& receiver, const Script& s,
                          const std::vector<char>& stream, const std::vector<char>& local,
                          size_t batch) {
  std::vector<char> got(stream.size());
  size_t sent = 0, received = 0, next_send = 0, next_recv = 0;
  for (long pass = 0;; ++pass) {
    REQUIRE(pass < 50'000'000);
    for (size_t k = 0; k < batch && next_send < s.sends.size(); ++k) {
      sender.post_send(stream.data() + sent, s.sends[next_send]);
      sent += s.sends[next_send++];
    }
    for (size_t k = 0; k < batch && next_recv < s.recvs.size(); ++k) {
      const Receive& r = s.recvs[next_recv++];
      if (r.reduce)
        receiver.post_recv_reduce(
            Reduction{got.data() + received, local.data() + received, r.dtype, ReduceOp::sum},
            r.bytes);
      else
        receiver.post_recv(got.data() + received, r.bytes);
      received += r.bytes;
    }
    sender.progress();
    receiver.progress();
    const bool all_posted = next_send == s.sends.size() && next_recv == s.recvs.size();
    if (all_posted && !sender.sending() && !receiver.receiving()) break;
  }
  CHECK(receiver.recvs_done() == s.recvs.size());
  return got;
}

const std::atomic<uint32_t> kAwake{0};  // the peer never sleeps: no doorbell is rung

ShmChannel tuned(ShmRing out, ShmRing in, bool copy_from_sender) {
  return ShmChannel(out, in, &kAwake, UniqueFd(), ::getpid(), copy_from_sender);
}

}  // namespace

TEST_CASE(
    "shm reference channel: the tuned channel delivers the same bytes, plain and reduced, for "
    "sends and receives of every size around the join, copy and ring limits") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Script script = make_script(seed);
    size_t total = 0;
    for (size_t n : script.sends) total += n;
    const std::vector<char> stream = random_bytes(total, seed * 7 + 1);
    const std::vector<char> local = random_bytes(total, seed * 7 + 2);
    const std::vector<char> want = expected(script, stream, local);
    for (size_t batch : {size_t{1}, size_t{1000}}) {
      CAPTURE(seed);
      CAPTURE(batch);
      {
        Rings rings;
        ShmReferenceChannel from(rings.ab_out, rings.ba_in), to(rings.ba_out, rings.ab_in);
        CHECK(deliver(from, to, script, stream, local, batch) == want);
      }
      {  // joined frames and copies from the sender's memory, read and folded in place
        Rings rings;
        ShmChannel from = tuned(rings.ab_out, rings.ba_in, true);
        ShmChannel to = tuned(rings.ba_out, rings.ab_in, true);
        CHECK(deliver(from, to, script, stream, local, batch) == want);
      }
      {  // the tuned channel reads the reference's frames
        Rings rings;
        ShmReferenceChannel from(rings.ab_out, rings.ba_in);
        ShmChannel to = tuned(rings.ba_out, rings.ab_in, true);
        CHECK(deliver(from, to, script, stream, local, batch) == want);
      }
      {  // and the reference reads the tuned one's joined frames (no copies: it cannot read them)
        Rings rings;
        ShmChannel from = tuned(rings.ab_out, rings.ba_in, false);
        ShmReferenceChannel to(rings.ba_out, rings.ab_in);
        CHECK(deliver(from, to, script, stream, local, batch) == want);
      }
    }
  }
}
