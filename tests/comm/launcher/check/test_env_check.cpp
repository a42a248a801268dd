// Tests of the pure parts of `ringgrad-run --check` (comm/launcher/check_table, node_facts,
// node_check_rows): the table, the report file round trip, and the verdict for builds that
// differ, a node that cannot listen and a probe that failed. The processes are exercised by
// tests/integration/test_check.cpp.
#include <doctest/doctest.h>

#include "comm/launcher/check/check_table.h"
#include "comm/launcher/check/node_check.h"
#include "comm/launcher/check/node_facts.h"
#include "core/error.h"

using namespace ringgrad;
using namespace ringgrad::comm;

namespace {

NodeRecord healthy(const std::string& host, int world) {
  NodeRecord r;
  r.facts.hostname = host;
  r.facts.build = "ringgrad 0.1.0 Release";
  r.facts.cpus = r.facts.cpus_online = 4;
  r.facts.cuda = "no device: none";
  r.address = "10.0.0.1";
  r.listen = "10.0.0.1:4000";
  r.reached.assign(world, "");
  return r;
}

const CheckRow* find(const std::vector<CheckRow>& rows, const std::string& node,
                     const std::string& check) {
  for (const auto& r : rows)
    if (r.node == node && r.check == check) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("check table: aligned columns and the verdict line") {
  std::vector<CheckRow> rows = {{"0", "rendezvous", CheckStatus::pass, "joined"},
                                {"all", "all_reduce_perf", CheckStatus::info, "x"}};
  const std::string ok = format_check_table(rows);
  CHECK(ok.find("NODE  CHECK            RESULT  DETAIL\n") == 0);
  CHECK(ok.find("0     rendezvous       PASS    joined\n") != std::string::npos);
  CHECK(ok.find("all 2 checks passed") != std::string::npos);
  CHECK(all_passed(rows));
  rows.push_back({"1", "cpus", CheckStatus::fail, "why"});
  CHECK_FALSE(all_passed(rows));
  CHECK(format_check_table(rows).find("1 of 3 checks FAILED") != std::string::npos);
}

TEST_CASE("check report: round trip, node rank, perf ports, malformed lines") {
  const std::vector<CheckRow> rows = {{"0", "version", CheckStatus::fail, "a\tb\nc"},
                                      {"1", "cuda", CheckStatus::info, ""}};
  const std::string text = serialize_check_report(3, {4242, 4343}, rows);
  CHECK(report_node_rank(text) == 3);
  CHECK(report_node_rank("") == -1);
  CHECK(report_perf_port(text, 0) == 4242);
  CHECK(report_perf_port(text, 1) == 4343);
  CHECK(report_perf_port(text, 2) == 0);
  CHECK(report_perf_port("# node 1\n", 0) == 0);
  const auto back = parse_check_rows(text);
  REQUIRE(back.size() == 2);
  CHECK(back[0].detail == "a b c");  // one line per row, whatever the detail held
  CHECK(back[1] == rows[1]);
  CHECK_THROWS_AS(parse_check_rows("0\tcpus\tPASS\n"), InvalidArgument);
  CHECK_THROWS_AS(parse_check_rows("0\tcpus\tMAYBE\tx\n"), InvalidArgument);
}

TEST_CASE("node facts: round trip, this machine's are filled in") {
  NodeFacts f = local_node_facts();
  CHECK(!f.hostname.empty());
  CHECK(f.cpus >= 1);
  CHECK(f.build == build_description());
  CHECK(!f.cuda.empty());
  const NodeFacts back = parse_node_facts(serialize_node_facts(f));
  CHECK(back.hostname == f.hostname);
  CHECK(back.build == f.build);
  CHECK(back.cpus == f.cpus);
  CHECK(back.cuda == f.cuda);
  CHECK_THROWS_AS(parse_node_facts("cpus=x\n"), InvalidArgument);
}

TEST_CASE("node check rows: every node passes, or each fault is its node's row") {
  std::vector<NodeRecord> nodes = {healthy("a", 2), healthy("b", 2)};
  auto rows = node_check_rows(nodes);
  CHECK(all_passed(rows));
  CHECK(rows.size() == 10);  // 5 checks x 2 nodes
  CHECK(find(rows, "1", "worker port")->detail == "10.0.0.1:4000 reached from node(s) 0,1");
  CHECK(find(rows, "0", "cuda")->status == CheckStatus::info);  // no GPU is not a failure

  SUBCASE("a different build on node 1") {
    nodes[1].facts.build = "ringgrad 0.2.0 Debug";
    rows = node_check_rows(nodes);
    CHECK(find(rows, "1", "version")->status == CheckStatus::fail);
    CHECK(find(rows, "1", "version")->detail.find("0.2.0") != std::string::npos);
    CHECK(find(rows, "0", "version")->status == CheckStatus::pass);
  }
  SUBCASE("node 0 cannot listen, node 1 is unreachable from node 0") {
    nodes[0].listen.clear();
    nodes[0].listen_error = "cannot listen on port 4000: Address already in use";
    nodes[1].reached[0] = "connect to 10.0.0.1:4000: Connection refused";
    rows = node_check_rows(nodes);
    CHECK(find(rows, "0", "worker port")->detail == nodes[0].listen_error);
    const CheckRow* one = find(rows, "1", "worker port");
    CHECK(one->status == CheckStatus::fail);
    CHECK(one->detail.find("from node 0: connect to 10.0.0.1:4000: Connection refused") !=
          std::string::npos);
  }
  SUBCASE("a GPU node") {
    nodes[0].facts.cuda_devices = 8;
    CHECK(find(node_check_rows(nodes), "0", "cuda")->status == CheckStatus::pass);
  }
}
