// Several ringgrad-run launchers on one host acting as the nodes of one job: static node ranks
// and c10d-assigned ones, a failure on one node stopping the other, job-wide restarts, a stop
// signal reaching the other node, and the rendezvous and connection errors a user sees.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <set>
#include <thread>

#include "core/unique_fd.h"
#include "tests/integration/launch_harness.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {

// One node's launcher command for a job of `nnodes` nodes at 127.0.0.1:port.
std::vector<std::string> node(const std::string& rdzv, int port, int node_rank, int nproc,
                              const TempDir& dir, std::vector<std::string> probe_args = {},
                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--nnodes",     "2", "--nproc-per-node", std::to_string(nproc),
                                   "--stop-grace", "2", "--rdzv-id",        "mn"};
  if (rdzv == "static") {
    args.insert(args.end(), {"--master-port", std::to_string(port)});
  } else {
    args.insert(args.end(),
                {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port)});
  }
  if (node_rank >= 0) args.insert(args.end(), {"--node-rank", std::to_string(node_rank)});
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {probe_path(), "--out", dir.path(), "--barrier", "1"});
  args.insert(args.end(), probe_args.begin(), probe_args.end());
  return launcher(args);
}

std::vector<std::map<std::string, std::string>> read_envs(const TempDir& dir, int world,
                                                          int generation = 0) {
  std::vector<std::map<std::string, std::string>> envs;
  for (int r = 0; r < world; ++r)
    envs.push_back(
        read_env_file(dir.path() + "/env." + std::to_string(r) + "." + std::to_string(generation)));
  return envs;
}

}  // namespace

TEST_CASE("two nodes, static backend with --node-rank: ranks follow node ranks") {
  TempDir dir;
  const int port = reserved_port();
  Child n1(node("static", port, 1, 2, dir));
  Child n0(node("static", port, 0, 2, dir));
  auto r0 = n0.wait(seconds(60));
  auto r1 = n1.wait(seconds(60));
  REQUIRE_MESSAGE(r0.status.ok(), r0.err);
  REQUIRE_MESSAGE(r1.status.ok(), r1.err);
  auto envs = read_envs(dir, 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(envs[r]["WORLD_SIZE"] == "4");
    CHECK(envs[r]["GROUP_RANK"] == std::to_string(r / 2));
    CHECK(envs[r]["LOCAL_RANK"] == std::to_string(r % 2));
    CHECK(envs[r]["GROUP_WORLD_SIZE"] == "2");
    CHECK(envs[r]["MASTER_PORT"] == envs[0]["MASTER_PORT"]);
  }
  CHECK(envs[0]["MASTER_PORT"] != std::to_string(port));  // no launcher listens there
}

TEST_CASE("two nodes, c10d backend without --node-rank: node ranks assigned in join order") {
  TempDir dir;
  const int port = reserved_port();
  Child a(node("c10d", port, -1, 2, dir));
  Child b(node("c10d", port, -1, 1, dir));
  auto ra = a.wait(seconds(60));
  auto rb = b.wait(seconds(60));
  CHECK_MESSAGE(ra.status.ok(), ra.err);  // both launchers' errors, should they fail
  CHECK_MESSAGE(rb.status.ok(), rb.err);
  REQUIRE((ra.status.ok() && rb.status.ok()));
  auto envs = read_envs(dir, 3);
  std::set<std::string> groups;
  for (auto& e : envs) {
    CHECK(e["WORLD_SIZE"] == "3");
    groups.insert(e["GROUP_RANK"]);
  }
  CHECK(groups == std::set<std::string>{"0", "1"});
  CHECK(envs[0]["GROUP_RANK"] == "0");  // rank 0 lives on node rank 0
  // Each node's ranks are contiguous: local rank = rank - (first rank of that node).
  for (int r = 1; r < 3; ++r)
    if (envs[r]["GROUP_RANK"] == envs[r - 1]["GROUP_RANK"])
      CHECK(std::stoi(envs[r]["LOCAL_RANK"]) == std::stoi(envs[r - 1]["LOCAL_RANK"]) + 1);
}

// A port on 127.0.0.1 bound without SO_REUSEADDR and not listening: no store can listen there
// and connects to it are refused, the state two launchers are left in when their listen()
// calls race and both lose.
class PortHeldShut {
 public:
  PortHeldShut() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  int port() const { return port_; }
  void release() { fd_.reset(); }

 private:
  UniqueFd fd_;
  int port_ = 0;
};

TEST_CASE("two nodes, c10d: when neither launcher could host at first, one hosts once it can") {
  TempDir dir;
  PortHeldShut held;
  const std::vector<std::string> conf = {"--rdzv-conf", "connect_timeout=20"};
  Child a(node("c10d", held.port(), -1, 1, dir, {}, conf));
  Child b(node("c10d", held.port(), -1, 1, dir, {}, conf));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // both tried to host, and joined nobody
  held.release();
  auto ra = a.wait(seconds(40));
  auto rb = b.wait(seconds(40));
  REQUIRE_MESSAGE(ra.status.ok(), ra.err);
  REQUIRE_MESSAGE(rb.status.ok(), rb.err);
  const std::string both = ra.err + rb.err;  // one of the two hosts the store
  const auto hosted = both.find("rendezvous store listening on");
  REQUIRE(hosted != std::string::npos);
  CHECK(both.find("rendezvous store listening on", hosted + 1) == std::string::npos);
}

TEST_CASE("c10d: a port on this host that is taken and never answers is named after the timeout") {
  TempDir dir;
  PortHeldShut held;
  auto r = run(node("c10d", held.port(), -1, 1, dir, {}, {"--rdzv-conf", "connect_timeout=3"}),
               seconds(30));
  const std::string error = launcher_error(r, 1);
  CHECK(error.find("could neither host nor join the store at 127.0.0.1:" +
                   std::to_string(held.port())) != std::string::npos);
}

TEST_CASE("two nodes: a worker failing on node 1 stops node 0's workers too") {
  TempDir dir;
  const int port = reserved_port();
  Child n0(node("static", port, 0, 2, dir, {"--sleep", "120"}));
  Child n1(node("static", port, 1, 2, dir, {"--fail-rank", "3", "--sleep", "120"}));
  auto r0 = n0.wait(seconds(40));
  auto r1 = n1.wait(seconds(40));
  REQUIRE_FALSE(r0.timed_out);
  REQUIRE_FALSE(r1.timed_out);
  CHECK(r0.status.code == 1);
  CHECK(r1.status.code == 1);
  for (const auto* r : {&r0, &r1}) {  // both launchers print the same first failure
    CHECK(r->err.find("first failure: rank 3 (local rank 1, node 1") != std::string::npos);
    CHECK(r->err.find("exit code 3") != std::string::npos);
  }
  CHECK(all_gone(read_pids(dir.path(), "pid."), seconds(10)));
}

TEST_CASE("two nodes: --max-restarts restarts every node, all see TORCHELASTIC_RESTART_COUNT=1") {
  TempDir dir;
  const int port = reserved_port();
  const std::vector<std::string> probe = {"--fail-rank", "2", "--fail-generation", "0"};
  Child n0(node("c10d", port, -1, 2, dir, probe, {"--max-restarts", "2"}));
  Child n1(node("c10d", port, -1, 2, dir, probe, {"--max-restarts", "2"}));
  auto r0 = n0.wait(seconds(60));
  auto r1 = n1.wait(seconds(60));
  REQUIRE_MESSAGE(r0.status.ok(), r0.err);
  REQUIRE_MESSAGE(r1.status.ok(), r1.err);
  for (auto& e : read_envs(dir, 4, 1)) CHECK(e["TORCHELASTIC_RESTART_COUNT"] == "1");
}

TEST_CASE("two nodes: SIGTERM to one launcher stops the job on the other node") {
  TempDir dir;
  const int port = reserved_port();
  Child n0(node("static", port, 0, 1, dir, {"--sleep", "120"}));
  Child n1(node("static", port, 1, 1, dir, {"--sleep", "120"}));
  for (int i = 0; i < 600 && count_files(dir.path(), "pid.") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  n1.signal(SIGTERM);
  auto r1 = n1.wait(seconds(30));
  auto r0 = n0.wait(seconds(30));
  REQUIRE_FALSE(r0.timed_out);
  CHECK(r1.status.code == 128 + SIGTERM);
  CHECK(r0.status.code == 128 + SIGTERM);
  CHECK(r0.err.find("launcher of node 1") != std::string::npos);
  CHECK(all_gone(read_pids(dir.path(), "pid."), seconds(10)));
}

TEST_CASE("two nodes: a launcher killed with -9 is noticed by the other node") {
  for (int victim : {1, 0}) {
    CAPTURE(victim);
    TempDir dir;
    const int port = reserved_port();
    const std::vector<std::string> conf = {"--rdzv-conf", "keep_alive_timeout=2"};
    Child n0(node("static", port, 0, 1, dir, {"--sleep", "120"}, conf));
    Child n1(node("static", port, 1, 1, dir, {"--sleep", "120"}, conf));
    for (int i = 0; i < 600 && count_files(dir.path(), "pid.") < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Child& killed = victim == 0 ? n0 : n1;
    Child& survivor = victim == 0 ? n1 : n0;
    killed.signal(SIGKILL);
    auto r = survivor.wait(seconds(30));
    killed.wait(seconds(5));
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.status.code == 1);
    // Node 0 hosts the store: its loss shows up as the store's connection going away.
    CHECK(r.err.find(victim == 0 ? "lost the rendezvous store: " : "lost node 1") !=
          std::string::npos);
    if (victim == 0) {
      CHECK(r.err.find("store connection lost (127.0.0.1:") != std::string::npos);
      const auto lost = lines_with(r.err, "  lost the rendezvous store: ");
      REQUIRE(lost.size() == 1);
      CHECK(lost[0].find(".cpp:") == std::string::npos);  // the sentence, not our source lines
    }
    CHECK(all_gone(read_pids(dir.path(), "pid."), seconds(10)));
  }
}

TEST_CASE("rendezvous short of nodes: times out naming joined/missing nodes and the endpoint") {
  TempDir dir;
  const int port = reserved_port();
  auto r = run(node("c10d", port, -1, 1, dir, {}, {"--rdzv-conf", "timeout=2"}), seconds(30));
  const std::string error = launcher_error(r, 1);
  CHECK(error.find("1/2 nodes joined") != std::string::npos);
  CHECK(error.find("missing: 1") != std::string::npos);
  CHECK(error.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("unreachable master: the error names host:port after the connect timeout") {
  TempDir dir;
  const int port = reserved_port();  // nobody listens there
  auto r =
      run(node("static", port, 1, 1, dir, {}, {"--rdzv-conf", "connect_timeout=1"}), seconds(30));
  const std::string error = launcher_error(r, 1);
  CHECK(error.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(error.find("could not connect") != std::string::npos);
}

TEST_CASE("a bind_addr the nodes do not reach, or a store key cap too small, is refused at once") {
  TempDir dir;
  const int port = reserved_port();
  // The store would listen on 127.0.0.2 while every node connects to 127.0.0.1: before, a
  // minute of nothing, then a connect timeout that never named bind_addr.
  auto r =
      run(node("static", port, 0, 1, dir, {}, {"--rdzv-conf", "bind_addr=127.0.0.2"}), seconds(30));
  const std::string error = launcher_error(r, 2);
  CHECK(error.find("bind_addr=127.0.0.2: the store would listen on that address only, but "
                   "the nodes (this one too) reach it at 127.0.0.1") != std::string::npos);
  // Too few keys for the job's 2 x 1 ranks: before, found when the last key was refused.
  r = run(node("static", port, 0, 1, dir), seconds(30), {{"RINGGRAD_STORE_MAX_KEYS", "10"}});
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 2);
  CHECK(r.err.find("RINGGRAD_STORE_MAX_KEYS=10 is below what a job of 2 ranks may write to its "
                   "store (384 keys") != std::string::npos);
}

TEST_CASE("a wrong store token is refused with one clear line") {
  TempDir dir;
  const int port = reserved_port();
  Child n0(node("static", port, 0, 1, dir, {}, {"--rdzv-conf", "token=right,timeout=20"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto bad = run(node("static", port, 1, 1, dir, {}, {"--rdzv-conf", "token=wrong"}), seconds(30));
  const std::string error = launcher_error(bad, 1);
  CHECK(error.find("token") != std::string::npos);
  CHECK(error.find("refused") != std::string::npos);
  n0.signal(SIGTERM);
  n0.wait(seconds(30));
}
