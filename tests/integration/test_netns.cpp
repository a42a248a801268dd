// Two "hosts" on one machine: two network namespaces joined by a veth pair, one ringgrad-run
// in each, rendezvousing over the veth link with addresses the test assigns inside those
// namespaces only. Needs root and a working `ip netns`; otherwise skips with a message.
#include <doctest/doctest.h>
#include <unistd.h>

#include <set>

#include "tests/integration/launch_harness.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {

constexpr const char* kAddrA = "10.213.7.1";
constexpr const char* kAddrB = "10.213.7.2";

bool ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  try {
    return run(args, seconds(10)).status.ok();
  } catch (const std::exception&) {  // no `ip` binary
    return false;
  }
}

// Creates the namespaces and the link; removes both namespaces (and so the veth) on exit.
class NamespacePair {
 public:
  NamespacePair()
      : a_("rgA" + std::to_string(::getpid())),
        b_("rgB" + std::to_string(::getpid())),
        veth_a_("rgva" + std::to_string(::getpid() % 100000)),
        veth_b_("rgvb" + std::to_string(::getpid() % 100000)) {
    if (::geteuid() != 0) {
      why_not_ = "not running as root";
      return;
    }
    if (!ip({"netns", "add", a_}) || !ip({"netns", "add", b_})) {
      why_not_ = "`ip netns add` failed (no iproute2 or no permission for namespaces)";
      return;
    }
    ok_ = ip({"link", "add", veth_a_, "type", "veth", "peer", "name", veth_b_}) &&
          ip({"link", "set", veth_a_, "netns", a_}) && ip({"link", "set", veth_b_, "netns", b_}) &&
          ip({"-n", a_, "addr", "add", std::string(kAddrA) + "/24", "dev", veth_a_}) &&
          ip({"-n", b_, "addr", "add", std::string(kAddrB) + "/24", "dev", veth_b_}) &&
          ip({"-n", a_, "link", "set", veth_a_, "up"}) &&
          ip({"-n", b_, "link", "set", veth_b_, "up"}) &&
          ip({"-n", a_, "link", "set", "lo", "up"}) && ip({"-n", b_, "link", "set", "lo", "up"});
    if (!ok_) why_not_ = "could not create and configure the veth pair";
  }
  ~NamespacePair() {
    ip({"netns", "del", a_});
    ip({"netns", "del", b_});
  }
  bool ok() const { return ok_; }
  const std::string& why_not() const { return why_not_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, veth_a_, veth_b_, why_not_;
  bool ok_ = false;
};

}  // namespace

TEST_CASE("two network namespaces as two hosts: rendezvous and worker store over a veth link") {
  NamespacePair hosts;
  if (!hosts.ok()) {
    return skip_test("no network namespaces: " + hosts.why_not());
  }
  TempDir dir;
  auto node = [&](const std::string& ns) {
    return std::vector<std::string>{"ip",
                                    "netns",
                                    "exec",
                                    ns,
                                    launcher({})[0],
                                    "--nnodes",
                                    "2",
                                    "--nproc-per-node",
                                    "2",
                                    "--rdzv-backend",
                                    "c10d",
                                    "--rdzv-endpoint",
                                    std::string(kAddrA) + ":29400",
                                    "--rdzv-id",
                                    "netns",
                                    "--rdzv-conf",
                                    "timeout=30",
                                    probe_path(),
                                    "--out",
                                    dir.path(),
                                    "--barrier",
                                    "1"};
  };
  Child a(node(hosts.a())), b(node(hosts.b()));
  auto ra = a.wait(seconds(60));
  auto rb = b.wait(seconds(60));
  REQUIRE_MESSAGE(ra.status.ok(), ra.err);
  REQUIRE_MESSAGE(rb.status.ok(), rb.err);
  std::set<std::string> master_addrs, groups;
  for (int r = 0; r < 4; ++r) {
    auto env = read_env_file(dir.path() + "/env." + std::to_string(r) + ".0");
    CHECK(env["WORLD_SIZE"] == "4");
    master_addrs.insert(env["MASTER_ADDR"]);
    groups.insert(env["GROUP_RANK"]);
  }
  // Everyone was told the same master, on the veth link (not loopback).
  REQUIRE(master_addrs.size() == 1);
  CHECK((*master_addrs.begin() == kAddrA || *master_addrs.begin() == kAddrB));
  CHECK(groups == std::set<std::string>{"0", "1"});
}

TEST_CASE(
    "mixed links in one group: two ranks share memory, a third in another namespace is reached "
    "over TCP, and every all-reduce is right") {
  NamespacePair hosts;
  if (!hosts.ok()) {
    return skip_test("no network namespaces: " + hosts.why_not());
  }
  auto node = [&](const std::string& ns, const char* nproc) {
    return std::vector<std::string>{
        "ip", "netns", "exec", ns, launcher({})[0], "--nnodes", "2", "--nproc-per-node", nproc,
        "--rdzv-backend", "c10d", "--rdzv-endpoint", std::string(kAddrA) + ":29401", "--rdzv-id",
        "mixed", "--rdzv-conf", "timeout=30", ALL_REDUCE_PERF_PATH,
        // every size class: direct, recursive doubling and the ring; values checked (-c 1)
        "-b", "8", "-e", "4M", "-f", "32", "-n", "2", "-w", "1", "-c", "1", "-d", "all"};
  };
  Child a(node(hosts.a(), "2")), b(node(hosts.b(), "1"));
  auto ra = a.wait(seconds(90));
  auto rb = b.wait(seconds(90));
  REQUIRE_MESSAGE(ra.status.ok(), ra.err);
  REQUIRE_MESSAGE(rb.status.ok(), rb.err);
  // Node ranks go by join order, so either node may print the table (ranks 0..n of the job).
  // all_reduce_perf's header names each rank's links; its table counts wrong elements.
  const std::string out = ra.out + rb.out;
  INFO("the two nodes printed: ", out);
  const auto shm_ranks = lines_with(out, "#  Rank ");
  int shared = 0, tcp_only = 0;
  for (const std::string& line : shm_ranks) {
    if (line.find("backend ring: shm to ") != std::string::npos &&
        line.find("; tcp to ") != std::string::npos)
      ++shared;
    if (line.find("backend ring: tcp to ") != std::string::npos &&
        line.find(',') != std::string::npos)
      ++tcp_only;
  }
  CHECK(shm_ranks.size() == 3);
  CHECK(shared == 2);
  CHECK(tcp_only == 1);
  CHECK(out.find("# Out of bounds values : 0 OK") != std::string::npos);
}

TEST_CASE("an endpoint without a route fails after the connect timeout, naming host:port") {
  NamespacePair hosts;
  if (!hosts.ok()) {
    return skip_test("no network namespaces: " + hosts.why_not());
  }
  // 10.213.8.1 is on no link of namespace B: packets for it never leave the namespace.
  auto r = run(
      {"ip", "netns", "exec", hosts.b(), launcher({})[0], "--nnodes", "2", "--rdzv-backend", "c10d",
       "--rdzv-endpoint", "10.213.8.1:29400", "--rdzv-conf", "connect_timeout=1", "true"},
      seconds(30));
  const std::string error = launcher_error(r, 1);
  CHECK(error.find("10.213.8.1:29400") != std::string::npos);
  CHECK(error.find("within 1 s") != std::string::npos);
}
