// Tests for comm/transport/shm: the SPSC byte ring (order, wrap-around, full and empty, two
// threads and two processes), the segment (its reservation failing with needed vs available),
// the doorbell (a sleeper is woken, a spinner costs no write), MeshTransport picking
// shared memory for ranks on this host as RINGGRAD_TRANSPORT says, and the reducing receive
// (recv_reduce) giving the bytes of a receive followed by reduce_into on every link.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "comm/reduce_ops/reduce_kernels.h"
#include "comm/transport/mesh_transport.h"
#include "comm/transport/shm/shm_mesh.h"
#include "core/error.h"
#include "tests/comm/ring_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::shm;

namespace {

// Byte i of a test stream: not periodic in any power of two, so a slip or a wrong wrap shows.
unsigned char pattern(uint64_t i) { return static_cast<unsigned char>((i * 131 + i / 251) % 253); }

// A ring of `capacity` bytes in a fresh segment, and its two ends.
struct RingInSegment {
  ShmSegment segment;
  ShmRing producer, consumer;
  explicit RingInSegment(size_t capacity)
      : segment(ShmSegment::create(sizeof(RingControl) + capacity, "test-ring")),
        producer(segment.data(), capacity, ShmRing::End::producer),
        consumer(segment.data(), capacity, ShmRing::End::consumer) {}
};

// Pushes `total` pattern bytes in pieces of `piece` (the last one shorter) until all went.
void produce(ShmRing& ring, uint64_t total, size_t piece) {
  std::vector<unsigned char> buffer(piece);
  for (uint64_t sent = 0; sent < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, total - sent));
    for (size_t i = 0; i < n; ++i) buffer[i] = pattern(sent + i);
    for (size_t done = 0; done < n;) {
      const size_t pushed = ring.push(buffer.data() + done, n - done);
      if (pushed == 0) std::this_thread::yield();  // the consumer may share our core
      done += pushed;
    }
    sent += n;
  }
}

// Pops `total` bytes in pieces of `piece`; returns the offset of the first wrong byte, or -1.
int64_t consume(ShmRing& ring, uint64_t total, size_t piece) {
  std::vector<unsigned char> buffer(piece);
  int64_t first_wrong = -1;
  for (uint64_t got = 0; got < total;) {
    const size_t n =
        ring.pop(buffer.data(), static_cast<size_t>(std::min<uint64_t>(piece, total - got)));
    if (n == 0) std::this_thread::yield();
    for (size_t i = 0; i < n && first_wrong < 0; ++i)
      if (buffer[i] != pattern(got + i)) first_wrong = static_cast<int64_t>(got + i);
    got += n;
  }
  return first_wrong;
}

// Ranks 0 and 1 with their shared memory set up over a socket pair, with 4 KiB rings.
struct MeshPair {
  net::Socket ends[2];
  std::unique_ptr<ShmMesh> mesh[2];
  MeshPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    ends[0] = net::Socket(fds[0]), ends[1] = net::Socket(fds[1]);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::thread other([&] {
      mesh[1] = std::make_unique<ShmMesh>(1, std::vector<ShmPeerLink>{{0, &ends[1]}}, 4096, true,
                                          deadline);
    });
    mesh[0] =
        std::make_unique<ShmMesh>(0, std::vector<ShmPeerLink>{{1, &ends[0]}}, 4096, true, deadline);
    other.join();
    REQUIRE(mesh[0]->channel(1) != nullptr);
    REQUIRE(mesh[1]->channel(0) != nullptr);
  }
};

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::u8};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::prod, ReduceOp::min,
                             ReduceOp::max};

std::vector<char> random_bytes(size_t n, std::mt19937& random) {
  std::vector<char> bytes(n);
  for (char& b : bytes) b = static_cast<char>(random());
  return bytes;
}

// What a receive of `received` followed by reduce_into gives: the reference for recv_reduce.
std::vector<char> received_then_reduced(const std::vector<char>& local,
                                        const std::vector<char>& received, DType dtype,
                                        ReduceOp op) {
  std::vector<char> want(local.size());
  reduce_into(want.data(), local.data(), received.data(), local.size() / dtype_size(dtype), dtype,
              op);
  return want;
}

}  // namespace

TEST_CASE("shm ring: fills, refuses when full, empties, and wraps around in order") {
  RingInSegment ring(64);
  std::vector<unsigned char> in(100), out(100);
  for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(i);
  CHECK(ring.consumer.pop(out.data(), 10) == 0);       // empty
  CHECK(ring.producer.push(in.data(), 100) == 64);     // only the capacity fits
  CHECK(ring.producer.push(in.data() + 64, 36) == 0);  // full
  CHECK(ring.consumer.pop(out.data(), 40) == 40);
  CHECK(ring.producer.push(in.data() + 64, 36) == 36);  // wraps past the end of the ring
  CHECK(ring.consumer.pop(out.data() + 40, 100) == 60);
  CHECK(std::memcmp(in.data(), out.data(), 100) == 0);
  CHECK_THROWS_AS(ShmRing(ring.segment.data(), 48, ShmRing::End::producer),
                  Error);  // not a power of two
}

TEST_CASE("shm ring: align_for skips both ends to the next cache line, only if the bytes fit") {
  RingInSegment ring(256);
  std::vector<unsigned char> in(256), out(256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(i);
  CHECK(ring.producer.push(in.data(), 5) == 5);
  CHECK(ring.producer.align_for(16));  // to byte 64
  CHECK(ring.producer.push(in.data() + 5, 16) == 16);
  CHECK(ring.consumer.pop(out.data(), 5) == 5);
  CHECK(ring.consumer.align_for(16));                   // past the same 59 bytes of padding
  CHECK(ring.consumer.pop(out.data() + 5, 100) == 16);  // exactly what followed them
  CHECK(std::memcmp(in.data(), out.data(), 21) == 0);
  CHECK(ring.producer.push(in.data(), 170) == 170);  // at 250 now, 86 bytes of room
  CHECK_FALSE(ring.producer.align_for(81));          // 6 bytes of padding + 81 do not fit...
  CHECK(ring.producer.align_for(80));                // ...6 + 80 do
  CHECK_FALSE(ring.consumer.align_for(150));         // 48 of padding + 150 > the 170 ready
  CHECK(ring.consumer.pop(out.data(), 170) == 170);  // and align_for(150) skipped nothing
  CHECK(std::memcmp(in.data(), out.data(), 170) == 0);
}

TEST_CASE("shm ring: 16 MiB through a 4 KiB ring between two threads, odd piece sizes") {
  RingInSegment ring(4096);
  const uint64_t total = 16 << 20;
  std::thread producer([&] { produce(ring.producer, total, 1000); });
  const int64_t wrong = consume(ring.consumer, total, 777);
  producer.join();
  CHECK(wrong == -1);
}

TEST_CASE("shm ring: between two processes sharing the segment") {
  RingInSegment ring(1 << 16);
  const uint64_t total = 16 << 20;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the producer; it shares the mapping (MAP_SHARED survives fork)
    produce(ring.producer, total, 300000);
    ::_exit(0);
  }
  const int64_t wrong = consume(ring.consumer, total, 65537);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(wrong == -1);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("shm segment: a reservation that does not fit fails saying needed and available") {
  // A file size limit caps a memfd too; set it in a child so the test process keeps its own.
  // SIGXFSZ keeps its default action, as in a job under `ulimit -f`: the reservation must fail
  // with a message (and the transport fall back to sockets), not kill the process.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = "no error";
    try {
      ShmSegment::create(8 << 20, "test-too-big");
    } catch (const IoError& e) {
      message = user_message(e);
    }
    [[maybe_unused]] ssize_t rc = ::write(pipe_fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  char text[512] = {};
  [[maybe_unused]] ssize_t n = ::read(pipe_fds[0], text, sizeof text - 1);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));  // not killed by SIGXFSZ
  const std::string message = text;
  CAPTURE(message);
  CHECK(message.find("cannot reserve 8.0 MiB of shared memory") != std::string::npos);
  CHECK(message.find("the file size limit (ulimit -f) is 1.0 MiB") != std::string::npos);
}

TEST_CASE(
    "shm doorbell: a sleeping rank is woken by its peer's bytes, a spinning one gets no write") {
  MeshPair pair;
  ShmChannel* to1 = pair.mesh[0]->channel(1);
  ShmChannel* to0 = pair.mesh[1]->channel(0);
  auto& mesh = pair.mesh;
  auto doorbell_rang = [&](int timeout_ms) {
    pollfd p{mesh[1]->fd(), POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
  };
  // Rank 1 is not sleeping: rank 0's bytes arrive without a write to its eventfd.
  to1->post_send("abc", 3);
  CHECK(to1->progress());
  CHECK_FALSE(doorbell_rang(0));
  char got[3] = {};
  to0->post_recv(got, 3);
  CHECK(to0->progress());
  CHECK(to0->recvs_done() == 1);
  // Rank 1 sleeps; rank 0 sends from another thread a little later and rings.
  mesh[1]->begin_sleep();
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    to1->post_send("xyz", 3);
    to1->progress();
  });
  CHECK(doorbell_rang(10000));
  sender.join();
  mesh[1]->end_sleep();
  CHECK_FALSE(doorbell_rang(0));  // end_sleep reset the eventfd
  // The wake-up also goes the other way: consuming frees room a sleeping producer waits for.
  mesh[0]->begin_sleep();
  to0->post_recv(got, 3);
  CHECK(to0->progress());
  CHECK(std::string(got, 3) == "xyz");
  pollfd p{mesh[0]->fd(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 1);
  mesh[0]->end_sleep();
}

TEST_CASE(
    "shm channel: large sends are copied straight from the sender (one copy), small ones through "
    "the ring") {
  MeshPair pair;
  ShmChannel* to1 = pair.mesh[0]->channel(1);
  ShmChannel* to0 = pair.mesh[1]->channel(0);
  // Sends of 3 bytes, 1 MiB (more than the 4 KiB ring: only a copy from the sender fits it in one
  // pass) and 5 bytes, received as 2 bytes, then 1 MiB + 1 spanning two frames, then 5.
  const size_t big = 1 << 20;
  std::vector<unsigned char> out(3 + big + 5), in(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(i);
  to1->post_send(out.data(), 3);
  to1->post_send(out.data() + 3, big);
  to1->post_send(out.data() + 3 + big, 5);
  to0->post_recv(in.data(), 2);
  to0->post_recv(in.data() + 2, big + 1);
  to0->post_recv(in.data() + 3 + big, 5);
  CHECK(to1->progress());  // three frames: 3 bytes inline, 1 MiB by address, 5 inline
  CHECK(to1->sending());   // the 1 MiB send waits until rank 1 has copied it
  CHECK(to0->progress());  // one pass takes it all: no 4 KiB ring could carry 1 MiB
  CHECK(to0->recvs_done() == 3);
  CHECK(in == out);
  CHECK(to1->progress());  // rank 1 counted the frame copied: the send completes
  CHECK_FALSE(to1->sending());
}

TEST_CASE(
    "shm channel: random send and receive sizes, inline and copied frames, keep the byte stream") {
  MeshPair pair;
  ShmChannel* to1 = pair.mesh[0]->channel(1);
  ShmChannel* to0 = pair.mesh[1]->channel(0);
  std::mt19937 random(7);
  const size_t total = 8 << 20;
  std::vector<unsigned char> out(total), in(total);
  for (size_t i = 0; i < total; ++i) out[i] = pattern(i);
  // Sends from 1 byte to 300 KiB (so both kinds of frame, across a 4 KiB ring), and receives of
  // other random sizes, so that receives start and end in the middle of frames of both kinds.
  auto pieces = [&](size_t most) {
    std::vector<size_t> sizes;
    for (size_t done = 0; done < total;) {
      size_t n = std::min<size_t>(total - done, 1 + random() % (random() % 4 == 0 ? most : 100));
      sizes.push_back(n);
      done += n;
    }
    return sizes;
  };
  size_t at = 0, receives = 0;
  for (size_t n : pieces(300 << 10)) to1->post_send(out.data() + at, n), at += n;
  at = 0;
  for (size_t n : pieces(200 << 10)) to0->post_recv(in.data() + at, n), at += n, ++receives;
  for (int pass = 0; pass < 1000000 && (to1->sending() || to0->receiving()); ++pass) {
    to1->progress();
    to0->progress();
  }
  CHECK_FALSE(to1->sending());
  CHECK(to0->recvs_done() == receives);
  CHECK(in == out);
}

TEST_CASE("transport: ranks on this host share memory unless RINGGRAD_TRANSPORT says otherwise") {
  struct Case {
    SameHostLink mode;
    LinkKind want;
  };
  for (const Case c :
       {Case{SameHostLink::automatic, LinkKind::shm}, Case{SameHostLink::shm, LinkKind::shm},
        Case{SameHostLink::unix_socket, LinkKind::unix_socket},
        Case{SameHostLink::tcp, LinkKind::tcp}}) {
    CAPTURE(link_name(c.want));
    auto store = std::make_shared<HashStore>();
    const int world = 3;
    // Each rank sends 3 MiB (three rings' worth) to both others at once and receives theirs:
    // only a progress loop that moves every peer's sends and receives together finishes.
    const size_t bytes = 3 << 20;
    std::vector<std::string> links(world);
    std::vector<int> wrong(world, 0);
    testing::spawn(world, [&](int rank) {
      MeshTransportOptions o;
      o.same_host = c.mode;
      o.setup_timeout = Milliseconds(20000);
      MeshTransport t(store, "shm/", rank, world, o);
      links[rank] = t.describe_links();
      for (int r = 0; r < world; ++r)
        if (r != rank) CHECK(t.link_kind(r) == c.want);
      std::vector<std::vector<unsigned char>> out(world), in(world);
      t.begin("exchange", Clock::now() + std::chrono::seconds(20));
      for (int r = 0; r < world; ++r) {
        if (r == rank) continue;
        out[r].resize(bytes);
        in[r].resize(bytes);
        for (size_t i = 0; i < bytes; ++i) out[r][i] = pattern(i + 1000 * rank + r);
        t.post_recv(r, in[r].data(), bytes);
        t.post_send(r, out[r].data(), bytes);
      }
      t.wait_all();
      for (int r = 0; r < world; ++r)
        if (r != rank)
          for (size_t i = 0; i < bytes; ++i)
            if (in[r][i] != pattern(i + 1000 * r + rank)) {
              ++wrong[rank];
              break;
            }
    });
    CHECK(wrong == std::vector<int>(world, 0));
    CHECK(links[0] == std::string(link_name(c.want)) + " to 1,2");
    CHECK(links[2] == std::string(link_name(c.want)) + " to 0,1");
  }
}

TEST_CASE(
    "transport: ranks whose RINGGRAD_TRANSPORT differ agree on the link at once, or fail saying "
    "why") {
  // Rank 1 does not offer shared memory; rank 0 must not wait for its offer (the setup timeout
  // would show as a TimeoutError), and with shm required it names the reason.
  for (const auto mode : {SameHostLink::automatic, SameHostLink::shm}) {
    const bool required = mode == SameHostLink::shm;
    CAPTURE(required);
    auto store = std::make_shared<HashStore>();
    std::string error[2];
    LinkKind links[2] = {LinkKind::tcp, LinkKind::tcp};
    testing::spawn(2, [&](int rank) {
      MeshTransportOptions o;
      o.same_host = rank == 0 ? mode : SameHostLink::unix_socket;
      o.setup_timeout = Milliseconds(5000);
      try {
        MeshTransport t(store, "mixed/", rank, 2, o);
        links[rank] = t.link_kind(1 - rank);
      } catch (const Error& e) {
        error[rank] = e.what();
      }
    });
    CHECK(error[1] == "");
    CHECK(links[1] == LinkKind::unix_socket);
    if (required) {
      CHECK(error[0].find("RINGGRAD_TRANSPORT=shm: rank 0 cannot share memory with rank 1") !=
            std::string::npos);
      CHECK(error[0].find("does not offer it") != std::string::npos);
    } else {
      CHECK(error[0] == "");
      CHECK(links[0] == LinkKind::unix_socket);
    }
  }
}

TEST_CASE(
    "shm channel: a reducing receive equals receive then reduce, every dtype and op, across ring "
    "wraps, split elements and copied frames") {
  MeshPair pair;  // 4 KiB rings: the stream wraps hundreds of times
  ShmChannel* to1 = pair.mesh[0]->channel(1);
  ShmChannel* to0 = pair.mesh[1]->channel(0);
  std::mt19937 random(11);
  for (DType dtype : kDTypes)
    for (ReduceOp op : kOps)
      for (bool in_place : {false, true}) {
        INFO("dtype: ", dtype_name(dtype));
        INFO("op: ", reduce_op_name(op));
        CAPTURE(in_place);
        const size_t elem = dtype_size(dtype), total = (300 << 10) / elem * elem;
        const std::vector<char> sent = random_bytes(total, random);
        std::vector<char> local = random_bytes(total, random);
        const std::vector<char> want = received_then_reduced(local, sent, dtype, op);
        std::vector<char> out(total);
        char* dst = in_place ? local.data() : out.data();
        // Sends of any byte count (so elements split between frames and pieces), a few of them
        // copied from the sender (>= 64 KiB); reducing receives of whole elements.
        for (size_t at = 0; at < total;) {
          const size_t n = std::min(
              total - at, random() % 8 == 0 ? (64 << 10) + random() % 9999 : 1 + random() % 3000);
          to1->post_send(sent.data() + at, n);
          at += n;
        }
        const uint64_t receives_before = to0->recvs_done();
        size_t receives = 0;
        for (size_t at = 0; at < total; ++receives) {
          const size_t n = std::min(total - at, elem * (1 + random() % (100 << 10) / elem));
          to0->post_recv_reduce(Reduction{dst + at, local.data() + at, dtype, op}, n);
          at += n;
        }
        for (int pass = 0; pass < 1000000 && (to1->sending() || to0->receiving()); ++pass) {
          to1->progress();
          to0->progress();
        }
        CHECK_FALSE(to1->sending());
        CHECK(to0->recvs_done() - receives_before == receives);
        CHECK(std::memcmp(dst, want.data(), total) == 0);
      }
}

TEST_CASE("transport: recv_reduce equals post_recv, wait_recv, reduce_into on every link") {
  for (const auto mode : {SameHostLink::shm, SameHostLink::unix_socket, SameHostLink::tcp}) {
    CAPTURE(static_cast<int>(mode));
    auto store = std::make_shared<HashStore>();
    testing::spawn(2, [&](int rank) {
      MeshTransportOptions o;
      o.same_host = mode;
      o.setup_timeout = Milliseconds(20000);
      MeshTransport t(store, "reduce/", rank, 2, o);
      std::mt19937 random(5);  // the same stream on both ranks
      for (DType dtype : kDTypes)
        for (ReduceOp op : kOps) {
          // 3 bytes ahead of the payload, so the payload's elements are not aligned in the
          // stream; sizes on both sides of the shared-memory copy-from-sender threshold.
          for (size_t count : {size_t{1}, size_t{1001}, size_t{70001}}) {
            const size_t bytes = count * dtype_size(dtype);
            const std::vector<char> sent = random_bytes(bytes, random);
            const std::vector<char> local = random_bytes(bytes, random);
            t.begin("recv_reduce test", Clock::now() + std::chrono::seconds(20));
            if (rank == 0) {
              t.post_send(1, "abc", 3);
              t.post_send(1, sent.data(), bytes);
              t.wait_all();
              continue;
            }
            char head[3];
            t.post_recv(0, head, 3);
            t.wait_recv(0);
            std::vector<char> out(bytes);
            t.recv_reduce(0, Reduction{out.data(), local.data(), dtype, op}, bytes);
            t.wait_all();
            INFO("dtype: ", dtype_name(dtype));
            INFO("op: ", reduce_op_name(op));
            CAPTURE(count);
            CHECK(out == received_then_reduced(local, sent, dtype, op));
          }
        }
    });
  }
}
