// Tests of comm/launcher/launch_config: the flag value parsers and the cross-flag rules,
// each rejection carrying the flag's name.
#include <doctest/doctest.h>

#include "comm/launcher/launch_config.h"
#include "tests/comm/store_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

TEST_CASE("launch config: --nnodes, --nproc-per-node, endpoints") {
  CHECK(parse_nnodes("2") == std::pair<int, int>{2, 2});
  CHECK(parse_nnodes("1:4") == std::pair<int, int>{1, 4});
  for (const char* bad : {"0", "3:2", "x", "1:", ":2", "-1"}) {
    CAPTURE(bad);
    CHECK(message_of<InvalidArgument>([&] { parse_nnodes(bad); }).find("--nnodes") !=
          std::string::npos);
  }
  CHECK(parse_nproc_per_node("3") == 3);
  CHECK(parse_nproc_per_node("cpu") >= 1);
  CHECK(parse_nproc_per_node("auto") >= 1);
  CHECK_THROWS_AS(parse_nproc_per_node("0"), InvalidArgument);
  CHECK_THROWS_AS(parse_nproc_per_node("many"), InvalidArgument);

  CHECK(parse_endpoint("node1:1234", 29400) == std::pair<std::string, int>{"node1", 1234});
  CHECK(parse_endpoint("node1", 29400) == std::pair<std::string, int>{"node1", 29400});
  CHECK(parse_endpoint("[::1]:5", 29400) == std::pair<std::string, int>{"::1", 5});
  for (const char* bad : {"host:", ":80", "h:99999", "h:x", "[::1", "[::1]:"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_endpoint(bad, 29400), InvalidArgument);
  }
}

TEST_CASE("launch config: --rdzv-conf, --redirects/--tee, --local-ranks-filter") {
  auto kv = parse_key_values("timeout=5,last_call_timeout=0.5,token=a=b", "--rdzv-conf");
  CHECK(kv["token"] == "a=b");  // only the first '=' separates
  LaunchConfig c;
  apply_rdzv_conf(c, kv);
  CHECK(c.rdzv_timeout.count() == 5000);
  CHECK(c.last_call_timeout.count() == 500);
  CHECK(c.token == "a=b");
  CHECK(message_of<InvalidArgument>([&] {
          apply_rdzv_conf(c, {{"timout", "5"}});
        }).find("unknown key 'timout'") != std::string::npos);
  CHECK_THROWS_AS(apply_rdzv_conf(c, {{"timeout", "-1"}}), InvalidArgument);
  CHECK_THROWS_AS(parse_key_values("novalue", "--rdzv-conf"), InvalidArgument);

  auto all = parse_stream_selection("3", "--tee");
  CHECK(all.for_rank(0) == 3);
  CHECK(all.for_rank(7) == 3);
  auto per = parse_stream_selection("0:1,2:2", "--redirects");
  CHECK(per.for_rank(0) == 1);
  CHECK(per.for_rank(1) == 0);
  CHECK(per.for_rank(2) == 2);
  CHECK_THROWS_AS(parse_stream_selection("4", "--tee"), InvalidArgument);
  CHECK(parse_rank_list("0,2", "--local-ranks-filter") == std::set<int>{0, 2});
}

TEST_CASE("launch config: cross-flag rules") {
  auto base = [] {
    LaunchConfig c;
    c.command = {"prog"};
    return c;
  };
  auto rejects = [](LaunchConfig c, const std::string& fragment) {
    auto msg = message_of<InvalidArgument>([&] { validate(c); });
    CHECK_MESSAGE(msg.find(fragment) != std::string::npos, msg);
  };
  LaunchConfig ok = base();
  validate(ok);
  CHECK(ok.node_rank == 0);  // static, one node: node rank 0

  LaunchConfig c = base();
  c.max_nodes = 2;
  c.min_nodes = 2;
  c.node_rank = 5;
  rejects(c, "--node-rank 5 must be below --nnodes 2");
  c.node_rank = -1;
  rejects(c, "needs --node-rank");  // static multi-node
  c.rdzv_backend = "etcd";
  rejects(c, "--rdzv-backend 'etcd'");
  c.rdzv_backend = "c10d";
  rejects(c, "--rdzv-endpoint");
  c.rdzv_host = "h";
  validate(c);  // c10d assigns node ranks

  LaunchConfig s = base();
  s.standalone = true;
  validate(s);
  CHECK(s.rdzv_host == "127.0.0.1");  // --standalone binds loopback on a free port
  CHECK(s.rdzv_port == 0);
  s = base();
  s.standalone = true;
  s.max_nodes = 2;
  rejects(s, "--standalone");

  LaunchConfig t = base();
  t.tee.all = 3;
  rejects(t, "--log-dir");
  LaunchConfig none = base();
  none.command.clear();
  rejects(none, "no program");
  LaunchConfig range = base();
  range.min_nodes = 1;
  range.max_nodes = 3;
  range.node_rank = 0;
  rejects(range, "needs --rdzv-backend c10d");
}
