// Hostile-input tests of TcpStoreServer: targeted malformed frames (each must close only its
// own connection), then a fuzz run of >= 100,000 random and mutated frames, after which the
// server must still answer correctly and hold every key it held before.
#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "tests/comm/store_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

std::string hello(const std::string& token) {
  return FrameWriter().u8(uint8_t(StoreOp::hello)).u32(kStoreMagic).str(token).i64(-1).frame();
}

constexpr const char* kToken = "fuzz-token";

TcpStoreServerOptions fuzz_server_options() {
  TcpStoreServerOptions o;
  o.token = kToken;
  o.max_frame_bytes = 64 << 10;
  return o;
}

}  // namespace

TEST_CASE("store server: each kind of bad frame closes only its own connection") {
  TcpStoreServer server(fuzz_server_options());
  auto good = connect_to(server, kToken);
  good->set("k", "v");
  const std::string too_big =
      FrameWriter().u8(uint8_t(StoreOp::set)).str("k").str(std::string(100 << 10, 'x')).frame();
  const std::string cases[] = {
      std::string("\0\0\0\0", 4),                                                  // empty frame
      too_big,                                                                     // over the cap
      hello(kToken) + std::string("\xff\xff\xff\x7f", 4),                          // huge length
      FrameWriter().u8(uint8_t(StoreOp::set)).str("k").str("v").frame(),           // no hello first
      hello(kToken) + FrameWriter().u8(200).frame(),                               // unknown op
      hello(kToken) + FrameWriter().u8(uint8_t(StoreOp::get)).u32(999).frame(),    // short string
      hello(kToken) + FrameWriter().u8(uint8_t(StoreOp::num_keys)).u8(0).frame(),  // trailing
      hello(kToken) + hello(kToken),                                               // second hello
      hello(kToken) + FrameWriter().u8(uint8_t(StoreOp::check)).u32(1u << 30).frame(),
  };
  int64_t rejected = 0;
  for (const auto& bytes : cases) {
    RawClient raw(server.port());
    REQUIRE(raw.send(bytes));
    CHECK(raw.closed_by_server());
    CHECK(server.rejected_connections() == ++rejected);
    CHECK(good->get("k") == "v");
  }
  {  // a frame cut short by the client going away
    RawClient raw(server.port());
    REQUIRE(
        raw.send(hello(kToken) +
                 FrameWriter().u8(uint8_t(StoreOp::set)).str("k").str("v").frame().substr(0, 7)));
    raw.finish_writing();
    CHECK(raw.closed_by_server());
  }
  CHECK(good->get("k") == "v");
}

TEST_CASE("store server: before its hello a client may not announce more than a few KiB") {
  TcpStoreServer server(TcpStoreServerOptions{});  // default frame cap: 16 MiB
  RawClient raw(server.port());
  const std::string header("\0\0\x10\0", 4);  // 1 MiB, little-endian; no body follows
  REQUIRE(raw.send(header));
  CHECK(raw.closed_by_server());  // at once, not after buffering 1 MiB from a stranger
  CHECK(server.rejected_connections() == 1);
}

TEST_CASE("store server: survives 100,000 random and mutated frames") {
  TcpStoreServer server(fuzz_server_options());
  auto keeper = connect_to(server, kToken);
  constexpr int kHeld = 100;
  for (int i = 0; i < kHeld; ++i)
    keeper->set("held/" + std::to_string(i), "value-" + std::to_string(i * 7));
  keeper->add("held/counter", 41);

  std::mt19937_64 rng(12345);
  auto below = [&](uint64_t n) { return rng() % n; };
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(below(256));
    return s;
  };
  // Requests that are answered at once: a parked get/wait would make the next frame on the
  // connection a protocol error of its own, hiding the hostile frame behind it.
  auto prompt_frame = [&](const std::string& key) {
    switch (below(5)) {
      case 0:
        return FrameWriter()
            .u8(uint8_t(StoreOp::set))
            .str(key)
            .str(random_bytes(below(40)))
            .frame();
      case 1:
        return FrameWriter()
            .u8(uint8_t(StoreOp::add))
            .str(key + "/n")
            .i64(int64_t(below(9)) - 4)
            .frame();
      case 2:
        return FrameWriter().u8(uint8_t(StoreOp::compare_set)).str(key).str("").str("x").frame();
      case 3: return FrameWriter().u8(uint8_t(StoreOp::check)).strs({key, key + "/n"}).frame();
      default: return FrameWriter().u8(uint8_t(StoreOp::num_keys)).frame();
    }
  };
  auto template_frame = [&]() {
    const std::string key = "fuzz/" + std::to_string(below(50));
    switch (below(3)) {
      case 0: return FrameWriter().u8(uint8_t(StoreOp::get)).str(key).i64(below(20)).frame();
      case 1:
        return FrameWriter()
            .u8(uint8_t(StoreOp::wait))
            .strs({key, key + "/n"})
            .i64(below(20))
            .frame();
      default: return prompt_frame(key);
    }
  };
  auto mutate = [&](std::string f) {
    switch (below(4)) {
      case 0:  // flip a few bytes anywhere, length header included
        for (int i = 0, n = 1 + int(below(4)); i < n; ++i)
          f[below(f.size())] ^= char(1 + below(255));
        return f;
      case 1: return f.substr(0, 4 + below(f.size() - 4));  // truncated (header kept)
      case 2: return f + random_bytes(1 + below(16));       // trailing garbage in the stream
      default: {                                            // a lying length header
        const uint32_t n = below(2) ? uint32_t(rng()) : uint32_t(below(f.size() + 8));
        for (int i = 0; i < 4; ++i) f[i] = char((n >> (8 * i)) & 0xff);
        return f;
      }
    }
  };

  // Each connection: maybe a hello, a few good requests, then one hostile frame, which the
  // server must read (only good, promptly answered requests precede it) and survive.
  constexpr int64_t kHostileFrames = 100'000;
  const int64_t frames_before = server.frames_received();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int64_t hostile = 0, good = 0, left_open = 0;
  while (hostile < kHostileFrames && std::chrono::steady_clock::now() < deadline) {
    RawClient raw(server.port());
    std::string stream;
    int frames = 0;
    if (below(4) != 0) {
      stream += hello(kToken);
      ++frames;
      for (int i = 0, n = int(below(4)); i < n; ++i, ++frames)
        stream += prompt_frame("fuzz/" + std::to_string(below(50)));
    }
    stream += below(3) == 0 ? random_bytes(4 + below(48)) : mutate(template_frame());
    if (!raw.send(stream)) continue;
    good += frames;
    ++hostile;
    raw.finish_writing();
    left_open += raw.closed_by_server() ? 0 : 1;  // the stream ended: the server must close
  }
  CHECK(left_open == 0);
  MESSAGE("hostile frames: ", hostile, ", good requests: ", good,
          ", frames the server read: ", server.frames_received() - frames_before,
          ", connections rejected: ", server.rejected_connections());
  REQUIRE(hostile >= kHostileFrames);
  CHECK(server.frames_received() - frames_before >= hostile + good);
  CHECK(server.rejected_connections() > kHostileFrames / 2);

  // The long-lived client and a new one both see every held key intact.
  auto fresh = connect_to(server, kToken);
  for (int i = 0; i < kHeld; ++i) {
    const std::string key = "held/" + std::to_string(i);
    CHECK(keeper->get(key, Milliseconds(1000)) == "value-" + std::to_string(i * 7));
    CHECK(fresh->get(key, Milliseconds(1000)) == "value-" + std::to_string(i * 7));
  }
  CHECK(fresh->add("held/counter", 1) == 42);
  CHECK(fresh->num_keys() >= kHeld + 1);
  CHECK_THROWS_AS(fresh->get("held/absent", Milliseconds(50)), TimeoutError);
  CHECK(fresh->get("held/0") == "value-0");
}

TEST_CASE("store server: frames count against the memory cap from their header on") {
  // 40 clients past their hello each announce a 15 MiB frame and send 1 KiB of it. Before,
  // each was given its 15 MiB at once (600 MiB in all); now each counts against the store's
  // 64 MiB cap from its header, and past the cap a frame is refused without being held.
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  auto set_frame = [](size_t value_bytes) {
    return FrameWriter().u8(uint8_t(StoreOp::set)).str("k").str(std::string(value_bytes, 'x'));
  };
  const std::string announced = set_frame(15 << 20).frame().substr(0, 1024);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 40; ++i) {
    clients.push_back(std::make_unique<RawClient>(server.port()));
    REQUIRE(clients.back()->send(hello(kToken) + announced));
  }
  // Each hello is one request read, and so is each frame refused; four frames fit the cap.
  CHECK(eventually([&] { return server.frames_received() == 40 + 36; }));
  CHECK(server.arriving_bytes() > 4 * (size_t{15} << 20));
  CHECK(server.arriving_bytes() <= kDefaultStoreMaxBytes);
  auto good = connect_to(server, kToken);
  good->set("small", "fits");
  // A client's own frame past what is left is refused with a clear error; it stays connected.
  auto full = message_of<InvalidArgument>([&] { good->set("big", std::string(15 << 20, 'y')); });
  CHECK(full.find("store is full: a request of 1572") != std::string::npos);
  CHECK(full.find("RINGGRAD_STORE_MAX_MB") != std::string::npos);
  clients.clear();  // they go away: what they held is released
  CHECK(eventually([&] { return server.arriving_bytes() == 0; }));
  good->set("big", std::string(15 << 20, 'y'));
  CHECK(good->get("small") == "fits");
}

TEST_CASE("store server: connections are capped, and so are those yet to say hello") {
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  // Strangers that connect and say nothing: 256 are kept (for 10 s), the oldest closed first.
  std::vector<std::unique_ptr<RawClient>> strangers;
  for (int i = 0; i < 280; ++i) strangers.push_back(std::make_unique<RawClient>(server.port()));
  CHECK(eventually([&] { return server.rejected_connections() == 280 - 256; }));
  CHECK(server.open_connections() == 256);
  CHECK(strangers.front()->closed_by_server());
  // Clients with the token still get in: the first evicts the oldest stranger to make room.
  std::vector<std::unique_ptr<TcpStore>> members;
  for (int i = 0; i < 20; ++i) members.push_back(connect_to(server, kToken));
  CHECK(server.rejected_connections() == 280 - 256 + 1);
  members.front()->set("still", "served");
  CHECK(members.back()->get("still") == "served");

  // RINGGRAD_STORE_MAX_CONNECTIONS caps all connections.
  ::setenv("RINGGRAD_STORE_MAX_CONNECTIONS", "30", 1);
  TcpStoreServer capped(o);
  ::unsetenv("RINGGRAD_STORE_MAX_CONNECTIONS");
  std::vector<std::unique_ptr<TcpStore>> thirty;
  for (int i = 0; i < 30; ++i) thirty.push_back(connect_to(capped, kToken));
  auto over = message_of<IoError>([&] { connect_to(capped, kToken); });
  CHECK(over.find("did not complete the ringgrad store handshake") != std::string::npos);
  thirty.pop_back();
  CHECK(eventually([&] { return capped.open_connections() == 29; }));
  thirty.push_back(connect_to(capped, kToken));
  thirty.back()->set("k", "v");
  CHECK(thirty.front()->get("k") == "v");
}
