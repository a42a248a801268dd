// Tests for comm/transport/tcp: which interface a rank listens on (RINGGRAD_SOCKET_IFNAME, else
// the route to the store's host), and the refusal of loopback when the ranks span hosts.
// Loopback only: a second host is faked by publishing its address entry in the store.
#include <doctest/doctest.h>

#include <cstdlib>

#include "comm/store/prefix_store.h"
#include "comm/store/tcp_store_server.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"
#include "tests/comm/ring_fixtures.h"
#include "tests/comm/store_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Sets an environment variable for one scope (tests run one at a time).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("interface: the route to a 127.0.0.1 store host is loopback, and so is no store host") {
  const auto routed = tcp::select_interface(std::nullopt, "127.0.0.1");
  CHECK(routed.address == "127.0.0.1");
  CHECK(routed.name == "lo");
  CHECK(routed.reason == "route to the store host 127.0.0.1");
  const auto in_process = tcp::select_interface(std::nullopt, "");
  CHECK(in_process.address == "127.0.0.1");
  CHECK(contains(tcp::select_interface(std::string("nope0,lo"), "").reason,
                 "RINGGRAD_SOCKET_IFNAME=nope0,lo"));
  CHECK_THROWS_WITH_AS(tcp::select_interface(std::nullopt, "no-such-host.invalid"),
                       doctest::Contains("cannot resolve the store host 'no-such-host.invalid'"),
                       IoError);
}

TEST_CASE("interface: ranks on a TcpStore at 127.0.0.1 (also under a PrefixStore) publish loopback") {
  TcpStoreServer server(TcpStoreServerOptions{});
  spawn(2, [&](int rank) {
    auto pg = make_ring_group(connect_to(server), rank, 2, "routed");
    pg->barrier()->wait();
  });
  make_ring_group(std::make_shared<PrefixStore>("job", connect_to(server)), 0, 1, "prefixed");
  auto reader = connect_to(server);
  CHECK(starts_with(reader->get("ringpg/routed/g0/addr/0"), "127.0.0.1:"));
  CHECK(starts_with(reader->get("ringpg/routed/g0/addr/1"), "127.0.0.1:"));
  CHECK(starts_with(reader->get("job/ringpg/prefixed/g0/addr/0"), "127.0.0.1:"));
}

TEST_CASE("interface: loopback is refused on every rank when the ranks span hosts") {
  for (const char* ifname : {"lo", ""}) {
    CAPTURE(ifname);
    auto store = std::make_shared<HashStore>();
    // Rank 1 "runs on another host": its address entry names a different hostname.
    store->set("ringpg/hosts/g0/addr/1", "127.0.0.1:9 some-other-host");
    std::optional<ScopedEnv> env;
    if (*ifname) env.emplace("RINGGRAD_SOCKET_IFNAME", ifname);
    const auto m = message_of<InvalidArgument>([&] { make_ring_group(store, 0, 2, "hosts"); });
    CHECK(contains(m, "listen on loopback, which other hosts cannot reach"));
    CHECK(contains(m, "1 on some-other-host"));
    CHECK(contains(m, "Set RINGGRAD_SOCKET_IFNAME"));
    CHECK(contains(m, "lo (127.0.0.1)"));
  }
}
