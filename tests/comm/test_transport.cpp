// Tests for comm/transport/socket: which interface a rank listens on (RINGGRAD_SOCKET_IFNAME, else
// the route to the store's host), the refusal of loopback when the ranks span hosts, and when a
// peer is reached over a unix socket instead of TCP.
// Loopback only: a second host is faked by publishing its address entry in the store.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "comm/store/prefix_store.h"
#include "comm/store/tcp_store_server.h"
#include "comm/transport/mesh_transport.h"
#include "comm/transport/socket/socket.h"
#include "core/error.h"
#include "core/hostname.h"
#include "tests/comm/ring_fixtures.h"
#include "tests/comm/store_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Sets an environment variable for one scope (tests run one at a time).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("interface: the route to a 127.0.0.1 store host is loopback, and so is no store host") {
  const auto routed = net::select_interface(std::nullopt, "127.0.0.1");
  CHECK(routed.address == "127.0.0.1");
  CHECK(routed.name == "lo");
  CHECK(routed.reason == "route to the store host 127.0.0.1");
  const auto in_process = net::select_interface(std::nullopt, "");
  CHECK(in_process.address == "127.0.0.1");
  CHECK(contains(net::select_interface(std::string("nope0,lo"), "").reason,
                 "RINGGRAD_SOCKET_IFNAME=nope0,lo"));
  CHECK_THROWS_WITH_AS(net::select_interface(std::nullopt, "no-such-host.invalid"),
                       doctest::Contains("cannot resolve the store host 'no-such-host.invalid'"),
                       IoError);
}

TEST_CASE(
    "interface: ranks on a TcpStore at 127.0.0.1 (also under a PrefixStore) publish loopback") {
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
    store->set("ringpg/hosts/g0/addr/1", "127.0.0.1:9 some-other-host - -");
    std::optional<ScopedEnv> env;
    if (*ifname) env.emplace("RINGGRAD_SOCKET_IFNAME", ifname);
    const auto m = message_of<InvalidArgument>([&] { make_ring_group(store, 0, 2, "hosts"); });
    CHECK(contains(m, "listen on loopback, which other hosts cannot reach"));
    CHECK(contains(m, "1 on some-other-host"));
    CHECK(contains(m, "Set RINGGRAD_SOCKET_IFNAME"));
    CHECK(contains(m, "lo (127.0.0.1)"));
  }
}

TEST_CASE("transport: a peer on this host is reached over a unix socket, others over TCP") {
  // Rank 0 is faked: it publishes an address entry, listens on TCP and on a unix socket, and
  // reports which one rank 1 (a real MeshTransport) connected to.
  struct Case {
    const char* what;
    bool same_identity, real_unix_name, unix_allowed, want_unix;
  };
  const Case cases[] = {
      {"same host", true, true, true, true},
      {"same host, RINGGRAD_TRANSPORT=tcp", true, true, false, false},
      {"another kernel or network namespace", false, true, true, false},
      {"same host, the unix connect fails: TCP instead", true, false, true, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto store = std::make_shared<HashStore>();
    int port = 0;
    std::string unix_name;
    net::Socket tcp_listener = net::listen_on("127.0.0.1", port);
    net::Socket unix_listener = net::listen_unix(unix_name);
    const std::string identity = c.same_identity ? net::host_identity() : "another-boot/net:[1]";
    store->set("t/addr/0", "127.0.0.1:" + std::to_string(port) + " " + hostname() + " " + identity +
                               " " + (c.real_unix_name ? unix_name : "no-such-name"));
    bool fake_saw_unix = false;
    std::string fake_error;
    std::thread fake([&] {
      try {
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        net::Socket s = net::accept_until({&tcp_listener, &unix_listener}, deadline, "fake rank 0");
        fake_saw_unix = s.is_unix();
        char hello[32];  // MeshTransport's handshake record, then its one-byte acknowledgement
        net::read_fully(s, hello, sizeof hello, deadline, "fake rank 0 reading the handshake");
        net::write_fully(s, "k", 1, deadline, "fake rank 0 acknowledging");
      } catch (const std::exception& e) {
        fake_error = e.what();
      }
    });
    MeshTransportOptions options;
    options.setup_timeout = Milliseconds(10000);
    // Unix sockets only: shared memory needs a real rank 0 at the other end (tested below).
    options.same_host = c.unix_allowed ? SameHostLink::unix_socket : SameHostLink::tcp;
    std::unique_ptr<MeshTransport> rank1;
    CHECK_NOTHROW(rank1 = std::make_unique<MeshTransport>(store, "t/", 1, 2, options));
    fake.join();
    CHECK(fake_error == "");
    CHECK(fake_saw_unix == c.want_unix);
    if (rank1) CHECK(rank1->link_kind(0) == (c.want_unix ? LinkKind::unix_socket : LinkKind::tcp));
  }
  CHECK(net::host_identity().find("/net:[") != std::string::npos);
}

TEST_CASE("tune_stream: a setting that cannot be applied is an IoError naming it, not ignored") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  net::Socket not_a_socket(fds[0]);
  ::close(fds[1]);
  CHECK_THROWS_WITH_AS(net::tune_stream(not_a_socket, 1 << 20),
                       doctest::Contains("cannot set TCP_NODELAY on socket"), IoError);
}
