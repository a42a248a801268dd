// Tests of comm/store: every Store operation against HashStore, TcpStore and PrefixStore,
// then what only the TCP store has: server-side timeouts that keep the connection, many
// concurrent clients, the token, generations, connect retry and connection loss.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <thread>

#include "comm/store/hash_store.h"
#include "comm/store/prefix_store.h"
#include "tests/comm/store_fixtures.h"
#include "tests/reserved_port.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

// Each backend under test, with whatever must stay alive behind it. `peer` is a second handle
// on the same data (a second connection for TCP: one TcpStore serves one call at a time).
struct Backend {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::shared_ptr<Store> peer;
};

Backend make_backend(const std::string& kind) {
  Backend b;
  if (kind == "hash") {
    b.store = b.peer = std::make_shared<HashStore>();
  } else if (kind == "tcp") {
    b.server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{});
    b.store = connect_to(*b.server);
    b.peer = connect_to(*b.server);
  } else {
    auto base = std::make_shared<HashStore>();
    b.store = std::make_shared<PrefixStore>("job7", base);
    b.peer = std::make_shared<PrefixStore>("job7", base);
  }
  return b;
}

}  // namespace

TEST_CASE("store: every operation behaves the same on every backend") {
  for (std::string kind : {"hash", "tcp", "prefix"}) {
    CAPTURE(kind);
    Backend b = make_backend(kind);
    Store& s = *b.store;

    s.set("a", std::string("x\0y", 3));  // values are bytes, NULs included
    CHECK(s.get("a") == std::string("x\0y", 3));
    s.set("a", "overwritten");
    CHECK(s.get("a") == "overwritten");

    CHECK(s.add("n", 5) == 5);
    CHECK(s.add("n", -2) == 3);
    CHECK(s.get("n") == "3");
    CHECK_THROWS_AS(s.add("a", 1), InvalidArgument);  // "overwritten" is no counter
    // Past a 64-bit counter: refused, the value kept (it was undefined behaviour; tests/fuzz).
    CHECK(message_of<InvalidArgument>([&] {
            s.add("n", INT64_MAX);
          }).find("would overflow a 64-bit counter") != std::string::npos);
    CHECK(s.add("n", 0) == 3);

    CHECK(s.compare_set("cas", "", "first") == "first");         // missing + empty: sets
    CHECK(s.compare_set("cas", "wrong", "second") == "first");   // mismatch: unchanged
    CHECK(s.compare_set("cas", "first", "second") == "second");  // match: swapped
    CHECK(s.compare_set("absent", "exp", "des") == "exp");       // missing + expected: no set
    CHECK_FALSE(s.check({"absent"}));

    CHECK(s.check({"a", "n"}));
    CHECK_FALSE(s.check({"a", "nope"}));
    s.wait({"a", "n"}, Milliseconds(100));

    const int64_t keys = s.num_keys();
    CHECK(keys == 3);
    CHECK(s.delete_key("a"));
    CHECK_FALSE(s.delete_key("a"));
    CHECK(s.num_keys() == keys - 1);

    // A get blocks until another thread sets the key.
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      b.peer->set("late", "here");
    });
    CHECK(s.get("late", Milliseconds(10'000)) == "here");
    writer.join();

    auto msg = message_of<TimeoutError>([&] { s.wait({"n", "never"}, Milliseconds(100)); });
    CHECK(msg.find("never'") != std::string::npos);
    CHECK(msg.find("100 ms") != std::string::npos);
  }
}

TEST_CASE("store: prefix store keeps users apart") {
  auto base = std::make_shared<HashStore>();
  PrefixStore one("one", base), two("two", base);
  one.set("k", "1");
  two.set("k", "2");
  CHECK(one.get("k") == "1");
  CHECK(two.get("k") == "2");
  CHECK(base->get("one/k") == "1");
  CHECK_FALSE(two.check({"other"}));
}

TEST_CASE("tcp store: a timed-out get names key and timeout and the connection keeps serving") {
  TcpStoreServer server(TcpStoreServerOptions{});
  auto store = connect_to(server);
  auto msg = message_of<TimeoutError>([&] { store->get("the_key", Milliseconds(200)); });
  CHECK(msg.find("'the_key'") != std::string::npos);
  CHECK(msg.find("200 ms") != std::string::npos);
  CHECK(msg.find(server.address().substr(server.address().find(':'))) != std::string::npos);
  store->set("the_key", "v");
  CHECK(store->get("the_key", Milliseconds(200)) == "v");
  CHECK(server.rejected_connections() == 0);
}

TEST_CASE("tcp store: 64 concurrent clients, counters under contention, cross-client waits") {
  TcpStoreServer server(TcpStoreServerOptions{});
  constexpr int kClients = 64, kAddsEach = 50;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect_to(server));
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::atomic<int> failures{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        // Everyone first waits on a key the last client sets: all 64 are parked at once.
        if (i == kClients - 1) clients[i]->set("go", "1");
        clients[i]->wait({"go"}, Milliseconds(20'000));
        for (int k = 0; k < kAddsEach; ++k) seen[i].push_back(clients[i]->add("counter", 1));
        clients[i]->set("done/" + std::to_string(i), "1");
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  // Atomic adds: every value 1..N was handed out exactly once.
  std::set<int64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  CHECK(all.size() == size_t{kClients * kAddsEach});
  CHECK(*all.begin() == 1);
  CHECK(*all.rbegin() == kClients * kAddsEach);
  CHECK(clients[0]->get("counter") == std::to_string(kClients * kAddsEach));
}

TEST_CASE("tcp store: the token is required, and refused on both sides") {
  TcpStoreServerOptions o;
  o.token = "s3cret";
  TcpStoreServer server(o);
  auto good = connect_to(server, "s3cret");
  good->set("k", "v");
  for (std::string bad : {"", "s3creT", "s3cret-and-more"}) {
    CAPTURE(bad);
    auto msg = message_of<IoError>([&] { connect_to(server, bad); });
    CHECK(msg.find("refused") != std::string::npos);
    CHECK(msg.find("token") != std::string::npos);
    CHECK(msg.find(std::to_string(server.port())) != std::string::npos);
  }
  CHECK(server.rejected_connections() == 3);  // the server logged and counted each refusal
  CHECK(good->get("k") == "v");
}

TEST_CASE("tcp store: total bytes and keys are capped, with a clear error to the writer only") {
  TcpStoreServerOptions o;
  o.max_bytes = 1000;
  o.max_keys = 3;
  TcpStoreServer server(o);
  auto filler = connect_to(server);
  filler->set("a", std::string(600, 'x'));
  auto big = message_of<InvalidArgument>([&] { filler->set("b", std::string(600, 'y')); });
  CHECK(big.find("store is full") != std::string::npos);
  CHECK(big.find("RINGGRAD_STORE_MAX_MB") != std::string::npos);
  auto other = connect_to(server);  // the store keeps serving everyone
  CHECK(other->get("a") == std::string(600, 'x'));
  filler->set("a", "small");  // replacing a value frees its bytes
  filler->set("b", std::string(600, 'y'));
  other->set("c", "1");
  auto keys = message_of<InvalidArgument>([&] { other->set("d", "1"); });
  CHECK(keys.find("RINGGRAD_STORE_MAX_KEYS") != std::string::npos);
  CHECK(other->delete_key("c"));
  other->set("d", "1");
  CHECK(other->add("d", 1) == 2);
}

TEST_CASE("tcp store: RINGGRAD_STORE_MAX_MB and _MAX_KEYS set the caps, bad values are named") {
  ::setenv("RINGGRAD_STORE_MAX_MB", "1", 1);
  ::setenv("RINGGRAD_STORE_MAX_KEYS", "2", 1);
  TcpStoreServer server(TcpStoreServerOptions{});  // default options: the variables decide
  ::unsetenv("RINGGRAD_STORE_MAX_MB");
  ::unsetenv("RINGGRAD_STORE_MAX_KEYS");
  auto client = connect_to(server);
  std::string said;
  try {
    client->set(std::string(10'000, 'k'), std::string(2 << 20, 'x'));  // a hostile key, too
  } catch (const InvalidArgument& e) {
    said = e.message();
  }
  // Refused from the frame's header on, before its 2 MiB arrived.
  CHECK(said.find("store is full: a request of 2107") != std::string::npos);
  CHECK(said.find("past its memory cap of 1 MiB") != std::string::npos);
  CHECK(said.find("RINGGRAD_STORE_MAX_MB") != std::string::npos);
  CHECK(said.find(".cpp:") == std::string::npos);  // the server sends its sentence, not its source
  client->set("a", "1");
  client->set("b", "1");
  CHECK_THROWS_AS(client->set("c", "1"), InvalidArgument);
  CHECK_THROWS_AS(client->add("c", 1), InvalidArgument);
  CHECK_THROWS_AS(client->compare_set("c", "", "1"), InvalidArgument);
  // A wait for more keys than can ever exist is refused, not parked with a watcher per key.
  said = message_of<InvalidArgument>([&] { client->wait({"a", "b", "c"}, Milliseconds(100)); });
  CHECK(said.find("naming 3 keys, more than the store may hold (2") != std::string::npos);
  CHECK_THROWS_AS(client->check({"a", "b", "c"}), InvalidArgument);
  CHECK(client->check({"a", "b"}));

  for (const char* bad : {"0", "-1", "lots", "99999999999999999999", "1.5"}) {
    CAPTURE(bad);
    ::setenv("RINGGRAD_STORE_MAX_MB", bad, 1);
    auto msg = message_of<InvalidArgument>([] { TcpStoreServer s(TcpStoreServerOptions{}); });
    ::unsetenv("RINGGRAD_STORE_MAX_MB");
    CHECK(msg.find("RINGGRAD_STORE_MAX_MB='") != std::string::npos);
    CHECK(msg.find("must be a whole number from 1 to 1048576") != std::string::npos);
  }
  ::setenv("RINGGRAD_STORE_MAX_KEYS", "0", 1);
  auto msg = message_of<InvalidArgument>([] { TcpStoreServer s(TcpStoreServerOptions{}); });
  ::unsetenv("RINGGRAD_STORE_MAX_KEYS");
  CHECK(msg.find("RINGGRAD_STORE_MAX_KEYS='0' must be a whole number") != std::string::npos);
}

TEST_CASE("tcp store: a client of another generation is refused") {
  TcpStoreServerOptions o;
  o.generation = 1;
  TcpStoreServer server(o);
  connect_to(server, "", 1)->set("k", "v");
  auto msg = message_of<IoError>([&] { connect_to(server, "", 0); });
  CHECK(msg.find("stale generation 0") != std::string::npos);
}

TEST_CASE("tcp store: connect retries until the server appears, and names the address if not") {
  const int port =
      ringgrad::testing::reserved_port();  // refuses connects; the late server binds it
  TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = Milliseconds(300);
  auto msg = message_of<TimeoutError>([&] { TcpStore s(o); });
  CHECK(msg.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(msg.find("300 ms") != std::string::npos);

  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    TcpStoreServerOptions so;
    so.port = port;
    server = std::make_unique<TcpStoreServer>(so);
  });
  o.connect_timeout = Milliseconds(20'000);
  TcpStore client(o);  // retries through "connection refused" until the server listens
  late.join();
  client.set("k", "v");
  CHECK(client.get("k") == "v");
}

TEST_CASE("tcp store: a server that goes away during a wait is a lost connection, not a hang") {
  auto server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{});
  auto client = connect_to(*server);
  const std::string address = client->address();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.reset();
  });
  auto msg = message_of<IoError>([&] { client->wait({"never"}, Milliseconds(30'000)); });
  killer.join();
  CHECK(msg.find("store connection lost (" + address + ")") != std::string::npos);
  auto again = message_of<IoError>([&] { client->set("k", "v"); });
  CHECK(again.find("lost") != std::string::npos);
}

TEST_CASE("tcp store: a port in use is one clear error naming it") {
  TcpStoreServer first(TcpStoreServerOptions{});
  TcpStoreServerOptions o;
  o.port = first.port();
  auto msg = message_of<IoError>([&] { TcpStoreServer second(o); });
  CHECK(msg.find("127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
  CHECK(msg.find("in use") != std::string::npos);
}

TEST_CASE("store barrier: names the ranks that did not arrive") {
  HashStore store;
  std::thread other([&] { store_barrier(store, "b1", 1, 2, Milliseconds(5000)); });
  store_barrier(store, "b1", 0, 2, Milliseconds(5000));
  other.join();
  auto msg = message_of<TimeoutError>([&] { store_barrier(store, "b2", 0, 3, Milliseconds(100)); });
  CHECK(msg.find("1/3 ranks arrived") != std::string::npos);
  CHECK(msg.find("missing ranks: 1, 2") != std::string::npos);
}
