// `ringgrad-run --check` end to end on this host: one node, two nodes (two launchers, as two
// machines would run them), a worker port another program holds (its row fails with the
// reason and the benchmark is not run), and a node that never joins.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include "tests/integration/launch_harness.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {

// A listening socket on 0.0.0.0:port, or none (-1) when the port is taken.
struct HeldPort {
  int fd = -1;
  explicit HeldPort(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 4) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~HeldPort() {
    if (fd >= 0) ::close(fd);
  }
  int port() const {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    return ntohs(sa.sin_port);
  }
};

// A port whose successor is free too: --check's second job uses --master-port + 1.
int free_port_pair() {
  for (;;) {
    const int port = reserved_port();
    if (HeldPort(port + 1).fd >= 0) return port;
  }
}

std::vector<std::string> check_node(int nnodes, int node_rank, int port,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--check",
                                   "--nnodes",
                                   std::to_string(nnodes),
                                   "--node-rank",
                                   std::to_string(node_rank),
                                   "--master-port",
                                   std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  return launcher(args);
}

// The table row of `node` and `check`, or "" (columns are padded with spaces).
std::string row(const std::string& out, const std::string& node, const std::string& check) {
  for (const auto& line : lines_with(out, node + " ")) {
    std::istringstream words(line);
    std::string n, c;
    words >> n >> c;
    if (n == node && c == check) return line;
    if (n == node && c == "worker" && check == "worker port") return line;
  }
  return "";
}

}  // namespace

TEST_CASE("check: one node passes every row and prints the benchmark table") {
  auto r = run(check_node(1, 0, free_port_pair(), {"--nproc-per-node", "2"}), seconds(90));
  INFO(r.out, r.err);
  CHECK(r.status.ok());
  for (const char* check : {"rendezvous", "worker port", "version", "cpus"})
    CHECK(row(r.out, "0", check).find("PASS") != std::string::npos);
  CHECK(row(r.out, "0", "cuda") != "");
  CHECK(row(r.out, "all", "all_reduce_perf").find("ring") != std::string::npos);
  CHECK(row(r.out, "all", "all_reduce_perf").find("PASS") != std::string::npos);
  // No GPU here: the NCCL sweep is an INFO row saying why it did not run.
  std::vector<std::string> nccl;
  for (const auto& line : lines_with(r.out, "all "))
    if (line.find("all_reduce_perf nccl") != std::string::npos) nccl.push_back(line);
  REQUIRE(nccl.size() == 1);
  CHECK(nccl[0].find("INFO") != std::string::npos);
  CHECK(nccl[0].find("not run: ") != std::string::npos);
  CHECK(r.out.find("# Out of bounds values : 0 OK") != std::string::npos);
  CHECK(r.out.find("world size 2") != std::string::npos);
  CHECK(r.out.find("checks passed") != std::string::npos);
}

TEST_CASE("check: two nodes reach each other's worker ports") {
  const int port = free_port_pair();
  Child n1(check_node(2, 1, port));
  Child n0(check_node(2, 0, port));
  auto r0 = n0.wait(seconds(90));
  auto r1 = n1.wait(seconds(90));
  INFO(r0.out, r0.err, r1.out, r1.err);
  CHECK(r0.status.ok());
  CHECK(r1.status.ok());
  for (const char* node : {"0", "1"}) {
    CHECK(row(r0.out, node, "worker port").find("reached from node(s) 0,1") != std::string::npos);
    CHECK(row(r0.out, node, "rendezvous").find("PASS") != std::string::npos);
  }
  CHECK(row(r0.out, "1", "version").find("same as node 0") != std::string::npos);
  CHECK(row(r0.out, "all", "all_reduce_perf").find("2 ranks, #wrong 0") != std::string::npos);
  CHECK(r1.out.find("node 1: every check passed") != std::string::npos);
}

TEST_CASE("check: a worker port held by another program fails that node's row") {
  const int port = free_port_pair();
  int base = 0;
  std::unique_ptr<HeldPort> held;
  while (!held) {               // node 0 probes base, node 1 base + 1, which this test holds
    base = HeldPort(0).port();  // released at once: node 0 binds it without SO_REUSEADDR
    held = std::make_unique<HeldPort>(base + 1);
    if (held->fd < 0) held.reset();
  }
  const std::vector<std::string> extra = {"--check-port", std::to_string(base)};
  Child n1(check_node(2, 1, port, extra));
  Child n0(check_node(2, 0, port, extra));
  auto r0 = n0.wait(seconds(90));
  auto r1 = n1.wait(seconds(90));
  INFO(r0.out, r0.err, r1.out, r1.err);
  CHECK(r0.status.code == 1);
  CHECK(r1.status.code == 1);
  const std::string blocked = row(r0.out, "1", "worker port");
  CHECK(blocked.find("FAIL") != std::string::npos);
  CHECK(blocked.find("cannot listen on port " + std::to_string(base + 1)) != std::string::npos);
  CHECK(blocked.find("Address already in use") != std::string::npos);
  CHECK(row(r0.out, "0", "worker port").find("PASS") != std::string::npos);
  CHECK(row(r0.out, "all", "all_reduce_perf").find("not run") != std::string::npos);
  CHECK(r0.out.find("checks FAILED") != std::string::npos);
}

TEST_CASE("check: a node that never joins is a failed rendezvous row naming the endpoint") {
  const int port = free_port_pair();
  auto r = run(check_node(2, 0, port, {"--rdzv-conf", "timeout=2"}), seconds(60));
  INFO(r.out, r.err);
  CHECK(r.status.code == 1);
  const std::string rdzv = row(r.out, "0", "rendezvous");
  CHECK(rdzv.find("FAIL") != std::string::npos);
  CHECK(rdzv.find("1/2") != std::string::npos);
  CHECK(rdzv.find(std::to_string(port)) != std::string::npos);
}

TEST_CASE("check: a PROGRAM after --check, or --check-port alone, is bad input") {
  auto with_program = run(launcher({"--check", "--standalone", "./train"}), seconds(20));
  CHECK(with_program.status.code == 2);
  CHECK(with_program.err.find("--check runs no PROGRAM") != std::string::npos);
  auto port_alone = run(launcher({"--check-port", "40000", "--standalone", "true"}), seconds(20));
  CHECK(port_alone.status.code == 2);
  CHECK(port_alone.err.find("--check-port only applies with --check") != std::string::npos);
}
