// The workers' ports of a launcher's store (Note [One store per job]): PyTorch's TCPStore
// protocol byte for byte as torch 2.x clients speak it, each generation in its own keys, and
// who may connect. tests/torch_plugin/agent_store.py drives the same port with PyTorch's own
// client under ringgrad-run.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include "comm/store/socket_owner.h"
#include "tests/comm/store_fixtures.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

// PyTorch's encodings: integers little-endian 64-bit, strings length-prefixed.
std::string u32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
std::string u64(uint64_t v) { return u32(static_cast<uint32_t>(v)) + u32(v >> 32); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
std::string strs(const std::vector<std::string>& v) {
  std::string out = u64(v.size());
  for (const auto& s : v) out += str(s);
  return out;
}
std::string query(int q) { return std::string(1, static_cast<char>(q)); }
// VALIDATE (query 0 and the magic), then PING (query 13) with a nonce, as PyTorch connects.
std::string validate_and_ping(uint32_t nonce) {
  return query(0) + u32(0x3C85F7CE) + query(13) + u32(nonce);
}
const std::string kReady(1, '\0'), kNotReady(1, '\1');

std::unique_ptr<TcpStore> connect_port(int port, const std::string& token, int64_t generation) {
  TcpStoreOptions o;
  o.port = port;
  o.token = token;
  o.generation = generation;
  o.connect_timeout = Milliseconds(5000);
  return std::make_unique<TcpStore>(o);
}

}  // namespace

TEST_CASE("worker port: PyTorch's TCPStore protocol, every query, in its generation's keys") {
  TcpStoreServer server(TcpStoreServerOptions{});
  auto launcher = connect_to(server);
  launcher->set("rdzv/secret", "x");
  const int port = server.open_worker_listener(3);
  RawClient torch(port);
  REQUIRE(torch.send(validate_and_ping(0x1234)));
  CHECK(torch.receive(4) == u32(0x1234));
  // SET has no reply; a get is the client's WAIT and then GET.
  REQUIRE(torch.send(query(1) + str("/k") + str("v1")));
  REQUIRE(torch.send(query(6) + strs({"/k"})));
  CHECK(torch.receive(1) == kReady);
  REQUIRE(torch.send(query(3) + str("/k")));
  CHECK(torch.receive(10) == str("v1"));
  REQUIRE(torch.send(query(4) + str("c") + u64(5)));  // ADD
  CHECK(torch.receive(8) == u64(5));
  REQUIRE(torch.send(query(2) + str("/k") + str("v1") + str("v2")));  // COMPARE_SET
  CHECK(torch.receive(10) == str("v2"));
  REQUIRE(torch.send(query(5) + strs({"/k", "nope"})));  // CHECK
  CHECK(torch.receive(1) == kNotReady);
  REQUIRE(torch.send(query(8) + str("c")));  // DELETE_KEY: how many went
  CHECK(torch.receive(8) == u64(1));
  REQUIRE(torch.send(query(9) + str("/k") + str("xx")));  // APPEND, no reply
  REQUIRE(torch.send(query(11) + u64(2) + str("a") + str("1") + str("b") + str("2")));  // MULTI_SET
  REQUIRE(torch.send(query(10) + strs({"/k", "a", "b"})));                              // MULTI_GET
  CHECK(torch.receive(8 + 4 + 8 + 1 + 8 + 1) == str("v2xx") + str("1") + str("2"));
  REQUIRE(torch.send(query(7)));  // GETNUMKEYS: this generation's keys only
  CHECK(torch.receive(8) == u64(3));
  REQUIRE(torch.send(query(5) + strs({"rdzv/secret"})));  // the launchers' keys are not there
  CHECK(torch.receive(1) == kNotReady);
  CHECK(launcher->get("worker/3//k") == "v2xx");  // where the launcher sees them

  // A wait the client withdraws (its timeout passed): CANCEL_WAIT is answered WAIT_CANCELED.
  REQUIRE(torch.send(query(6) + strs({"later"})));
  REQUIRE(torch.send(query(12)));
  CHECK(torch.receive(1) == std::string(1, '\1'));
  // A wait another client's write completes.
  REQUIRE(torch.send(query(6) + strs({"late"})));
  launcher->set("worker/3/late", "1");
  CHECK(torch.receive(1) == kReady);

  // The generation over: its clients are closed and its keys forgotten, the launchers' kept.
  server.close_worker_listener(3);
  CHECK(torch.closed_by_server());
  CHECK_FALSE(launcher->check({"worker/3//k"}));
  CHECK(launcher->check({"rdzv/secret"}));
  CHECK(server.rejected_connections() == 0);
}

TEST_CASE("worker port: PyTorch 1.x's older protocol, as Debian's torch 1.13 speaks it") {
  TcpStoreServer server(TcpStoreServerOptions{});
  auto launcher = connect_to(server);
  const int port = server.open_worker_listener(2);
  RawClient torch(port);
  // No VALIDATE: ADD "init/" 1 first, and the queries numbered SET 0 ... DELETE_KEY 8.
  REQUIRE(torch.send(query(3) + str("init/") + u64(1)));
  CHECK(torch.receive(8) == u64(1));
  REQUIRE(torch.send(query(0) + str("/k") + str("v")));  // SET
  REQUIRE(torch.send(query(5) + strs({"/k"})));          // WAIT
  CHECK(torch.receive(1) == kReady);
  REQUIRE(torch.send(query(2) + str("/k")));  // GET
  CHECK(torch.receive(9) == str("v"));
  REQUIRE(torch.send(query(1) + str("/k") + str("v") + str("w")));  // COMPARE_SET
  CHECK(torch.receive(9) == str("w"));
  REQUIRE(torch.send(query(4) + strs({"/k"})));  // CHECK
  CHECK(torch.receive(1) == kReady);
  REQUIRE(torch.send(query(6)));  // GETNUMKEYS: init/ and /k
  CHECK(torch.receive(8) == u64(2));
  REQUIRE(torch.send(query(8) + str("/k")));  // DELETE_KEY
  CHECK(torch.receive(8) == u64(1));
  CHECK(launcher->get("worker/2/init/") == "1");
  RawClient watch(port);  // WATCH_KEY (7) is not served
  REQUIRE(watch.send(query(3) + str("init/") + u64(1) + query(7) + str("/k")));
  CHECK(watch.receive(8) == u64(2));
  CHECK(watch.closed_by_server());
  RawClient on_main(server.port());  // nor is PyTorch's protocol on the launchers' port
  REQUIRE(on_main.send(query(3) + str("init/") + u64(1)));
  CHECK(on_main.closed_by_server());
}

TEST_CASE(
    "worker port: ringgrad clients need the token and the generation, PyTorch's protocol "
    "only there") {
  TcpStoreServerOptions o;
  o.token = "job-token";
  TcpStoreServer server(o);
  auto launcher = connect_to(server, "job-token");
  const int port = server.open_worker_listener(1);
  auto worker = connect_port(port, "job-token", 1);
  worker->set("x", "1");
  CHECK(launcher->get("worker/1/x") == "1");
  CHECK(worker->num_keys() == 1);
  auto stale = message_of<IoError>([&] { connect_port(port, "job-token", 0); });
  CHECK(stale.find("stale generation 0") != std::string::npos);
  auto no_token = message_of<IoError>([&] { connect_port(port, "", 1); });
  CHECK(no_token.find("token") != std::string::npos);
  RawClient torch_on_main(server.port());
  REQUIRE(torch_on_main.send(validate_and_ping(7)));
  CHECK(torch_on_main.closed_by_server());
  CHECK(server.rejected_connections() == 3);
}

TEST_CASE("worker port: a PyTorch client on loopback must run as the store's user") {
  if (::geteuid() != 0)
    return ringgrad::testing::skip_test("not root: cannot connect as another user");
  TcpStoreServer server(TcpStoreServerOptions{});
  const int port = server.open_worker_listener(0);
  // A child as user 65534 (nobody) connects, validates and pings: answered means admitted.
  // Only system calls after fork: the parent has other threads.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(4);
    const char hello[] = {0, '\xce', '\xf7', '\x85', '\x3c', 13, 1, 2, 3, 4};
    if (::send(fd, hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello) ::_exit(0);
    char reply[4];
    ::_exit(::recv(fd, reply, sizeof reply, MSG_WAITALL) == 4 ? 1 : 0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // closed unanswered
  CHECK(server.rejected_connections() == 1);
  RawClient mine(port);  // the store's own user is admitted
  REQUIRE(mine.send(validate_and_ping(9)));
  CHECK(mine.receive(4) == u32(9));
}

TEST_CASE("socket owner: the kernel names the user of a loopback client, IPv4 or dual-stack") {
  // A listener and a client of it in this process: the client's socket is ours.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int server_port = ntohs(addr.sin_port);
  auto client_port = [](int fd) {
    sockaddr_storage me{};
    socklen_t n = sizeof me;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &n);
    return me.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&me)->sin_port)
                                   : ntohs(reinterpret_cast<sockaddr_in6*>(&me)->sin6_port);
  };
  const int v4 = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(v4, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(loopback_socket_owner("127.0.0.1", client_port(v4), "127.0.0.1", server_port) ==
        ::geteuid());
  // PyTorch's client: an IPv6 socket reaching 127.0.0.1 as ::ffff:127.0.0.1.
  const int v6 = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  mapped.sin6_port = addr.sin_port;
  REQUIRE(::inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr) == 1);
  REQUIRE(::connect(v6, reinterpret_cast<sockaddr*>(&mapped), sizeof mapped) == 0);
  CHECK(loopback_socket_owner("127.0.0.1", client_port(v6), "127.0.0.1", server_port) ==
        ::geteuid());
  // No such connection: nothing.
  CHECK_FALSE(loopback_socket_owner("127.0.0.1", 1, "127.0.0.1", server_port).has_value());
  for (int fd : {v4, v6, listener}) ::close(fd);
}
