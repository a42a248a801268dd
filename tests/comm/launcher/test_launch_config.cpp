// Tests of comm/launcher/launch_config: the flag value parsers and the cross-flag rules,
// each rejection carrying the flag's name; and of the --hostfile pieces that are pure
// functions (comm/launcher/hostfile, the ssh command of comm/launcher/ssh_launch).
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "comm/launcher/launch_config.h"
#include "comm/launcher/ssh/hostfile.h"
#include "comm/launcher/ssh/ssh_launch.h"
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
  for (const char* bad : {"host:", ":80", "h:99999", "h:x", "[::1", "[::1]:", "h:1:2", "h h:1"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_endpoint(bad, 29400), InvalidArgument);
  }
  CHECK(message_of<InvalidArgument>([] {
          parse_endpoint("[::1]:5", 29400);
        }).find("IPv6 endpoints are not supported yet") != std::string::npos);
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
  for (const char* bad : {"nan", "inf", "1e300", "0", "5s", ""}) {  // never a garbage duration
    CAPTURE(bad);
    for (const char* key : {"timeout", "connect_timeout", "keep_alive_timeout"})
      CHECK(message_of<InvalidArgument>([&] {
              apply_rdzv_conf(c, {{key, bad}});
            }).find("need a finite number of seconds above 0") != std::string::npos);
  }
  apply_rdzv_conf(c, {{"last_call_timeout", "0"}});  // no last call: allowed
  CHECK(c.last_call_timeout.count() == 0);
  apply_rdzv_conf(c, {{"bind_addr", "10.1.2.3"}});
  CHECK(c.bind_addr == "10.1.2.3");
  for (const char* bad : {"node1", "::1", "10.1.2", ""})
    CHECK_THROWS_AS(apply_rdzv_conf(c, {{"bind_addr", bad}}), InvalidArgument);
  CHECK_THROWS_AS(parse_key_values("novalue", "--rdzv-conf"), InvalidArgument);
  // A token holding ',' splits; the error must not print the token's pieces.
  const std::string split_token =
      message_of<InvalidArgument>([] { parse_key_values("token=s3cr,et99", "--rdzv-conf"); });
  CHECK(split_token.find("token_file=PATH") != std::string::npos);
  CHECK(split_token.find("s3cr") == std::string::npos);
  CHECK(split_token.find("et99") == std::string::npos);
  // token_file=: the first line of a file, kept out of ps.
  const std::string file = std::filesystem::temp_directory_path() / "ringgrad-token-test";
  std::ofstream(file) << "with,comma and space\nsecond line\n";
  apply_rdzv_conf(c, {{"token_file", file}});
  CHECK(c.token == "with,comma and space");
  std::ofstream(file) << "\n";
  CHECK(message_of<InvalidArgument>([&] {
          apply_rdzv_conf(c, {{"token_file", file}});
        }).find("its first line is empty") != std::string::npos);
  std::filesystem::remove(file);
  CHECK(message_of<InvalidArgument>([&] {
          apply_rdzv_conf(c, {{"token_file", file}});
        }).find("not a readable regular file") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] {
          apply_rdzv_conf(c, {{"token", "a"}, {"token_file", "/etc/hostname"}});
        }).find("token or token_file, not both") != std::string::npos);

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
  LaunchConfig standalone = base();
  standalone.standalone = true;
  standalone.rdzv_host = "10.0.0.1";  // was silently ignored
  rejects(standalone,
          "--standalone picks its own store on a free loopback port, so "
          "--rdzv-endpoint 10.0.0.1:29400 would be ignored");
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

  LaunchConfig zero = base();  // c10d on port 0 reaches no other host
  zero.rdzv_backend = "c10d";
  zero.rdzv_host = "h";
  zero.rdzv_port = 0;
  validate(zero);  // one node: its own launcher finds the port it bound
  zero.max_nodes = 2;
  rejects(zero, "--rdzv-endpoint h:0 picks a port on one host only");

  // A node beats once per --monitor-interval: longer than keep_alive_timeout/3, the other
  // nodes would take it for lost while it is fine.
  LaunchConfig slow = base();
  slow.rdzv_backend = "c10d";
  slow.rdzv_host = "h";
  slow.max_nodes = 2;
  slow.monitor_interval = std::chrono::milliseconds(10'000);  // keep_alive_timeout: 30 s
  validate(slow);
  slow.monitor_interval = std::chrono::milliseconds(11'000);
  rejects(slow,
          "--monitor-interval 11 s: a node checks in once per interval, so with "
          "keep_alive_timeout 30 s the others would take it for lost");
  slow.max_nodes = 1;  // no other node to miss its beats
  validate(slow);
}

TEST_CASE("hostfile: format, comments, slots") {
  const auto hosts = parse_hostfile(
      "# the cluster\n"
      "node-a slots=4\n"
      "\n"
      "  node-b   slots=2   # a comment after the entry\n"
      "localhost\n",
      "hosts.txt");
  CHECK(hosts == std::vector<HostfileEntry>{{"node-a", 4}, {"node-b", 2}, {"localhost", 1}});
}

TEST_CASE("hostfile: each error names the file, the line and the problem") {
  auto rejects = [](const std::string& text, const std::string& fragment) {
    auto msg = message_of<InvalidArgument>([&] { parse_hostfile(text, "hf"); });
    CHECK_MESSAGE(msg.find(fragment) != std::string::npos, msg);
  };
  rejects("a slots=2\nb slots\n", "hostfile hf:2: 'slots' is not key=value");
  rejects("slots=2\n", "hostfile hf:1: 'slots=2' is not a host name");
  rejects("a =3\n", "hf:1: '=3' is not key=value");
  rejects("a cores=2\n", "hostfile hf:1: unknown key 'cores'");
  rejects("a slots=0\n", "hf:1: slots '0' must be a whole number from 1 to 1024");
  rejects("# x\na slots=-3\n", "hf:2: slots '-3' must be a whole number from 1 to 1024");
  rejects("a slots=two\n", "hf:1: slots 'two' must be a whole number");
  rejects("a slots=99999999999\n", "slots '99999999999' must be a whole number");
  rejects("a slots=2000\n", "slots '2000' must be a whole number from 1 to 1024");
  // Each host may become the others' --master-addr: what could never be one is refused here.
  rejects("::1 slots=2\n",
          "hostfile hf:1: '::1': '::1' is not a host name or IPv4 address "
          "(IPv6 addresses are not supported yet)");
  rejects("a\nme@b\n", "hostfile hf:2: 'me@b': 'me@b' is not a host name");
  rejects("-v slots=1\n", "'-v' is not a host name");  // it would be an option to ssh
  rejects("a\nb\na slots=2\n", "hf:3: host 'a' is listed twice");
  rejects("# only comments\n\n", "hostfile hf: no hosts in it");
  CHECK(message_of<IoError>([] {
          read_hostfile("/nonexistent/hosts");
        }).find("cannot read hostfile '/nonexistent/hosts'") != std::string::npos);
  // /dev/zero was read until memory ran out.
  CHECK(message_of<InvalidArgument>([] {
          read_hostfile("/dev/zero");
        }).find("hostfile '/dev/zero' is not a regular file") != std::string::npos);
  const std::string big = std::filesystem::temp_directory_path() / "ringgrad-big-hostfile";
  std::ofstream(big) << std::string((1 << 20) + 1, '#');
  CHECK(message_of<InvalidArgument>([&] { read_hostfile(big); }).find("is larger than 1 MiB") !=
        std::string::npos);
  std::filesystem::remove(big);
}

TEST_CASE("ssh launch: the command each host runs") {
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(master_address({{"localhost", 1}, {"127.0.0.1", 1}}) == "localhost");
  CHECK(master_address({{"gpu-1", 8}, {"localhost", 8}}) == "gpu-1");
  CHECK(master_address({{"localhost", 8}, {"gpu-2", 8}}) != "localhost");  // our host name

  SshLaunchConfig c;
  c.hosts = {{"a", 2}, {"b", 3}};
  c.ssh_port = 2222;
  c.ssh_opts = {"-i", "/k"};
  c.export_vars = {"FOO"};
  c.remote_workdir = "/w d";
  c.remote_binary = "/bin/ringgrad-run";
  c.master_port = 29511;
  c.launcher_flags = {"--max-restarts", "1"};
  c.command = {"./train", "--epochs", "2"};
  const auto argv = ssh_command(c, 1, {"FOO=x y", "BAR=z"});
  REQUIRE(argv.size() == 11);
  CHECK(std::vector<std::string>(argv.begin(), argv.end() - 1) ==
        std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-i", "/k", "-o", "LogLevel=ERROR",
                                 "-p", "2222", "b"});
  const std::string& remote = argv.back();
  CAPTURE(remote);
  CHECK(remote.find("cd '/w d' && if [ ! -x '/bin/ringgrad-run' ]") == 0);
  CHECK(remote.find("exec env 'FOO=x y' '/bin/ringgrad-run' '--nnodes' '2' '--node-rank' '1' "
                    "'--nproc-per-node' '3' '--master-addr' 'a' '--master-port' '29511' "
                    "'--console-label' 'b' '--stop-on-stdin-eof' '--max-restarts' '1' '--' "
                    "'./train' '--epochs' '2'") != std::string::npos);
  CHECK(remote.find("BAR") == std::string::npos);  // only what --export names
  CHECK(message_of<InvalidArgument>([&] { ssh_command(c, 0, {}); }).find("--export FOO: not set") !=
        std::string::npos);
}

TEST_CASE("launch config: --signals-to-handle and --log-line-prefix-template") {
  CHECK(parse_signal_list("SIGTERM,SIGINT,SIGHUP,SIGQUIT") ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(parse_signal_list(" SIGUSR1 , SIGUSR2") == std::vector<int>{SIGUSR1, SIGUSR2});
  for (const char* bad : {"", "SIGFOO", "TERM", "SIGKILL", "SIGSTOP", "SIGCHLD", "15"}) {
    CAPTURE(bad);
    CHECK(message_of<InvalidArgument>([&] {
            parse_signal_list(bad);
          }).find("--signals-to-handle") != std::string::npos);
  }
  CHECK(expand_prefix_template("[${role_name}${local_rank}]:", "default", 5, 1, "h") ==
        "[default1]:");
  CHECK(expand_prefix_template("${hostname}:$rank: ", "r", 12, 0, "node8") == "node8:12: ");
  // Unknown names, a lone '$' and "$$" as Python's Template.safe_substitute leaves them.
  CHECK(expand_prefix_template("$x ${rank ${nope} $$ $", "r", 3, 0, "h") ==
        "$x ${rank ${nope} $ $");
  CHECK(expand_prefix_template("$rank_x", "r", 3, 0, "h") == "$rank_x");
}
