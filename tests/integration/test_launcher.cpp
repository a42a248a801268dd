// ringgrad-run on one node: the worker environment, failure teardown and its summary, signal
// names, restarts, signals to the launcher, orphans, port conflicts, bad flags and output
// routing. Each run has a deadline; the harness kills whatever outlives it.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "tests/integration/launch_harness.h"
#include "tests/reserved_port.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {
std::vector<std::string> probe_job(const std::string& nproc, const TempDir& dir,
                                   std::vector<std::string> probe_args,
                                   std::vector<std::string> launcher_args = {}) {
  std::vector<std::string> args = {"--standalone", "--nproc-per-node", nproc, "--stop-grace", "2"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.push_back(probe_path());
  args.insert(args.end(), {"--out", dir.path(), "--barrier", "1"});
  args.insert(args.end(), probe_args.begin(), probe_args.end());
  return launcher(args);
}

// The job failed as it should: the launcher exited 1 before the deadline, its summary says
// each of `says`, and every worker that wrote a pid file is gone.
void check_job_failed(const RunResult& r, const TempDir& dir, std::vector<std::string> says) {
  REQUIRE_FALSE(r.timed_out);  // a hang would be the bug
  CHECK(r.status.code == 1);
  for (const std::string& s : says) CHECK_MESSAGE(r.err.find(s) != std::string::npos, s, r.err);
  CHECK(all_gone(read_pids(dir.path(), "pid."), seconds(10)));
}

// The pid a probe worker wrote to `file` (pid.<rank>.<restart>).
pid_t pid_in(const std::string& file) {
  pid_t pid = 0;
  std::ifstream(file) >> pid;
  REQUIRE(pid > 0);
  return pid;
}
}  // namespace

TEST_CASE("ringgrad-run: 4 workers get the full, consistent torchrun environment, no stray fds") {
  TempDir dir;
  auto r = run(probe_job("4", dir, {"--check-fds", "1"}), seconds(60));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  std::set<std::string> ranks, ports;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_file(dir.path() + "/env." + std::to_string(rank) + ".0");
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["LOCAL_WORLD_SIZE"] == "4");
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["GROUP_WORLD_SIZE"] == "1");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "0");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "none");
    if (!std::getenv("OMP_NUM_THREADS")) CHECK(env["OMP_NUM_THREADS"] == "1");
    ranks.insert(env["RANK"]);
    ports.insert(env["MASTER_PORT"]);
  }
  CHECK(ranks.size() == 4);
  CHECK(ports.size() == 1);  // one master for everyone, and the barrier met there
  CHECK(r.out.find("probe rank 3 of 4 ready") != std::string::npos);
  CHECK(r.err.find("rendezvous store listening on 127.0.0.1:") != std::string::npos);  // loopback
}

TEST_CASE("ringgrad-run: a worker exiting 3 stops the others, the summary names it") {
  TempDir dir;
  auto r = run(probe_job("3", dir, {"--fail-rank", "2", "--exit-code", "3", "--sleep", "120"}),
               seconds(30));
  check_job_failed(r, dir,
                   {"first failure: rank 2 (local rank 2, node 0", "exit code 3",
                    "| probe rank 2 failing on purpose"});
}

TEST_CASE("ringgrad-run: death by signal is reported by signal name") {
  SUBCASE("SIGSEGV raised by the worker") {
    TempDir dir;
    auto r = run(probe_job("2", dir, {"--fail-rank", "1", "--signal", "11", "--sleep", "120"}),
                 seconds(30));
    check_job_failed(r, dir, {"rank 1", "signal SIGSEGV"});
  }
  SUBCASE("kill -9 from outside") {
    TempDir dir;
    Child job(probe_job("2", dir, {"--sleep", "120"}));
    for (int i = 0; i < 600 && count_files(dir.path(), "pid.") < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the barrier finish
    ::kill(pid_in(dir.path() + "/pid.1.0"), SIGKILL);
    check_job_failed(job.wait(seconds(30)), dir, {"first failure: rank 1", "signal SIGKILL"});
  }
}

TEST_CASE("ringgrad-run: a worker left stopped fails the job after --stopped-timeout, named") {
  // Before, a stopped worker went unnoticed: the others waited in their collective for the
  // whole collective timeout (600 s by default).
  SUBCASE("it stops itself (SIGSTOP)") {
    TempDir dir;
    auto r = run(probe_job("2", dir, {"--fail-rank", "1", "--signal", "19", "--sleep", "120"},
                           {"--stopped-timeout", "1"}),
                 seconds(60));
    check_job_failed(r, dir,
                     {"first failure: rank 1 (local rank 1, node 0",
                      "was stopped by SIGSTOP and not continued within 1 s"});
  }
  SUBCASE("kill -STOP from outside, during all-reduces, with the default timeout") {
    TempDir dir;
    Child job(probe_job("2", dir, {"--allreduces", "100000"}));
    for (int i = 0; i < 1200 && count_files(dir.path(), "joined.") < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid_in(dir.path() + "/pid.0.0"), SIGSTOP);
    check_job_failed(job.wait(seconds(60)), dir,
                     {"first failure: rank 0 (local rank 0, node 0",
                      "was stopped by SIGSTOP and not continued within 10 s"});
  }
}

TEST_CASE(
    "ringgrad-run: the watchdog names a rank hung outside the collectives, long before "
    "the timeout") {
  // Rank 2 is busy in its own code for 8 s before all-reduce #3; ranks 0 and 1 wait in it. With
  // a 2 s watchdog each names rank 2 (alive, last collective #2) well before the 60 s timeout,
  // and the job still succeeds once rank 2 arrives. Before, nothing was said until the timeout.
  TempDir dir;
  auto r = run(
      probe_job("3", dir,
                {"--allreduces", "5", "--hang-rank", "2", "--hang-before", "3", "--hang-s", "8"},
                {"--timeout", "60"}),
      seconds(90), {{"RINGGRAD_WATCHDOG_S", "2"}});
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  for (const char* waiter : {"[ringgrad rank 0 W", "[ringgrad rank 1 W"}) {
    const auto at = r.err.find(waiter);
    REQUIRE(at != std::string::npos);
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    CHECK(line.find("watchdog: allreduce #3 (") != std::string::npos);
    CHECK(line.find("for rank 2 (its last collective #2; alive: busy or stuck outside the "
                    "collectives)") != std::string::npos);
  }
}

TEST_CASE("ringgrad-run: under a file size limit the ranks of a host use unix sockets, warned") {
  // ulimit -f below the shared-memory segment's size: the kernel sent SIGXFSZ while the ranks
  // set it up, and every rank died. Now each says why and falls back to unix sockets.
  std::string command;
  for (const auto& word :
       launcher({"--standalone", "--nproc-per-node", "2", probe_path(), "--allreduces", "3"}))
    command += " '" + word + "'";
  auto r = run({"bash", "-c", "ulimit -f 64 && exec" + command}, seconds(60));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  CHECK(r.err.find("cannot reserve 1.0 MiB of shared memory: the file size limit (ulimit -f) is "
                   "64.0 KiB; they use unix sockets instead") != std::string::npos);
  CHECK(r.err.find("rank 0: unix to 1") != std::string::npos);
}

TEST_CASE("ringgrad-run: a child a worker moved to its own session (setsid) ends with the job") {
  // Killing the workers' process groups missed it, and it outlived the failed job. Rank 1 fails
  // 2 s after the barrier: failing at once, the job could end before rank 0 had forked its child
  // (a fresh-clone run saw one setsid file of two).
  TempDir dir;
  auto r = run(probe_job("2", dir,
                         {"--setsid-child", "1", "--fail-rank", "1", "--fail-after-ms", "2000",
                          "--sleep", "120"}),
               seconds(60));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 1);
  CHECK(count_files(dir.path(), "setsid.") == 2);
  CHECK(all_gone(read_pids(dir.path(), "setsid."), seconds(10)));
}

TEST_CASE("ringgrad-run: started in a script's background, SIGINT still ends it while it waits") {
  // A shell starts background jobs with SIGINT ignored: the launcher waited for the missing
  // node for the whole rendezvous timeout (900 s), deaf to the script's kill -INT.
  std::string command;
  for (const auto& word : launcher({"--nnodes", "2", "--node-rank", "0", "--master-port",
                                    std::to_string(reserved_port()), "sleep", "1"}))
    command += " '" + word + "'";
  auto r =
      run({"bash", "-c", command + " & pid=$!; sleep 1; kill -INT $pid; wait $pid"}, seconds(60));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 130);  // 128 + SIGINT, from the launcher
}

TEST_CASE("ringgrad-run: --max-restarts 2 restarts a job whose worker fails once") {
  TempDir dir;
  auto r = run(
      probe_job("3", dir, {"--fail-rank", "1", "--fail-generation", "0"}, {"--max-restarts", "2"}),
      seconds(60));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  CHECK(count_files(dir.path(), "env.") == 6);  // generations 0 and 1, three ranks each
  for (int rank = 0; rank < 3; ++rank) {
    auto env = read_env_file(dir.path() + "/env." + std::to_string(rank) + ".1");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "2");
  }
  CHECK(r.err.find("restart 1 of 2") != std::string::npos);
}

TEST_CASE("ringgrad-run: SIGTERM to the launcher ends everything, stubborn grandchildren too") {
  TempDir dir;
  Child job(probe_job("2", dir, {"--stubborn-child", "1", "--ignore-term", "1", "--sleep", "120"}));
  for (int i = 0; i < 600 && count_files(dir.path(), "child.") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(count_files(dir.path(), "child.") == 2);
  job.signal(SIGTERM);
  auto r = job.wait(seconds(30));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 128 + SIGTERM);
  CHECK(r.err.find("received SIGTERM") != std::string::npos);
  auto pids = read_pids(dir.path(), "pid.");
  auto children = read_pids(dir.path(), "child.");
  pids.insert(pids.end(), children.begin(), children.end());
  CHECK(all_gone(pids, seconds(5)));
}

TEST_CASE("ringgrad-run: kill -9 of the launcher takes its workers with it") {
  TempDir dir;
  Child job(probe_job("2", dir, {"--sleep", "120"}));
  for (int i = 0; i < 600 && count_files(dir.path(), "pid.") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(count_files(dir.path(), "pid.") == 2);
  job.signal(SIGKILL);
  job.wait(seconds(10));
  CHECK(all_gone(read_pids(dir.path(), "pid."), seconds(5)));  // PR_SET_PDEATHSIG
}

TEST_CASE("ringgrad-run: a master port in use is one clear line, port 0 runs side by side") {
  comm::TcpStoreServer squatter(comm::TcpStoreServerOptions{});
  const std::string port = std::to_string(squatter.port());
  auto r = run(launcher({"--master-port", port, "--nproc-per-node", "1", "true"}), seconds(10));
  const std::string error = launcher_error(r, 1);
  CHECK(error.find("127.0.0.1:" + port) != std::string::npos);
  CHECK(error.find("in use") != std::string::npos);

  TempDir a, b;
  auto args = [&](const TempDir& d) {
    return launcher({"--master-port", "0", "--nproc-per-node", "2", probe_path(), "--out", d.path(),
                     "--barrier", "1"});
  };
  Child first(args(a)), second(args(b));
  auto ra = first.wait(seconds(60));
  auto rb = second.wait(seconds(60));
  CHECK_MESSAGE(ra.status.ok(), ra.err);
  CHECK_MESSAGE(rb.status.ok(), rb.err);
}

TEST_CASE("ringgrad-run: bad input exits 2 with one line naming the flag") {
  const std::vector<std::vector<std::string>> cases = {
      {"--nproc-per-node", "0", "true"},
      {"--nnodes", "3:2", "true"},
      {"--node-rank", "5", "--nnodes", "2", "true"},
      {"--rdzv-endpoint", "host:", "true"},
      {"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:1", "true"},
      {"--rdzv-conf", "timeout", "true"},
      {"--tee", "7", "--log-dir", "/tmp", "true"},
      {"--no-such-flag", "true"},
      {"--node-rank", "-1", "true"},  // said it was missing, once
      {"--rdzv-endpoint", "127.0.0.1:29734:5", "--rdzv-backend", "c10d", "true"},
      {"--rdzv-endpoint", "[::1]:29400", "--rdzv-backend", "c10d", "true"},
      {"--monitor-interval", "nan", "true"},
      {"--stop-grace", "inf", "true"},
      {"--timeout", "nan", "true"},
      {"--nproc-per-node", "100000", "true"},
      {"--rdzv-conf", "token=", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1", "true"},
  };
  for (const auto& args : cases) {
    CAPTURE(args[0]);
    auto r = run(launcher(args), seconds(10));
    CHECK(r.status.code == 2);
    CHECK(lines_with(r.err, "ringgrad-run: error:").size() == 1);
    CHECK(r.err.find(args[0].substr(0, args[0].find('-', 2))) != std::string::npos);
  }
  // torchrun's underscore spelling is accepted too.
  auto ok = run(launcher({"--standalone", "--nproc_per_node", "2", "true"}), seconds(30));
  CHECK_MESSAGE(ok.status.ok(), ok.err);
}

TEST_CASE("ringgrad-run: --tee prefixes node:rank, --local-ranks-filter hides ranks, logs kept") {
  TempDir dir, logs;
  auto r = run(probe_job("2", dir, {},
                         {"--tee", "3", "--log-dir", logs.path(), "--local-ranks-filter", "0",
                          "--rdzv-id", "teejob"}),
               seconds(60));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  CHECK(r.out.find("[0:0]: probe rank 0 of 2 ready") != std::string::npos);
  CHECK(r.err.find("[0:0]: probe rank 0 stderr line") != std::string::npos);
  CHECK(r.out.find("probe rank 1") == std::string::npos);  // filtered from the console ...
  std::ifstream log(logs.path() + "/teejob/attempt_0/1/stdout.log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "probe rank 1 of 2 ready");  // ... but still in its log file
}

TEST_CASE("ringgrad-run: --redirects sends chosen streams to files only, '--' ends the options") {
  TempDir logs;
  auto r = run(launcher({"--standalone", "--nproc-per-node", "2", "--redirects", "0:1", "--log-dir",
                         logs.path(), "--rdzv-id", "redir", "--", "sh", "-c",
                         "echo out-$LOCAL_RANK; echo err-$LOCAL_RANK >&2"}),
               seconds(30));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  CHECK(r.out.find("out-0") == std::string::npos);  // local rank 0's stdout: file only
  CHECK(r.out.find("out-1") != std::string::npos);  // local rank 1: console as usual
  CHECK(r.err.find("err-0") != std::string::npos);  // stderr was not redirected
  std::ifstream log(logs.path() + "/redir/attempt_0/0/stdout.log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "out-0");
}

TEST_CASE("worker env: Slurm variables start a job without RANK, a conflicting RANK fails") {
  const int port = reserved_port();
  auto slurm = [&](int rank) {
    return std::map<std::string, std::string>{{"SLURM_PROCID", std::to_string(rank)},
                                              {"SLURM_NTASKS", "2"},
                                              {"SLURM_LOCALID", "0"},
                                              {"MASTER_ADDR", "127.0.0.1"},
                                              {"MASTER_PORT", std::to_string(port)}};
  };
  TempDir dir;
  Child r0({probe_path(), "--barrier", "1", "--out", dir.path()}, slurm(0));
  Child r1({probe_path(), "--barrier", "1", "--out", dir.path()}, slurm(1));
  auto a = r0.wait(seconds(30));
  auto b = r1.wait(seconds(30));
  CHECK_MESSAGE(a.status.ok(), a.err);
  CHECK_MESSAGE(b.status.ok(), b.err);
  CHECK(b.out.find("probe rank 1 of 2 ready") != std::string::npos);

  auto env = slurm(1);
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "2";
  auto bad = run({probe_path()}, seconds(10), env);
  CHECK(bad.status.code == 10);
  CHECK(bad.err.find("RANK=0 disagrees with SLURM_PROCID=1") != std::string::npos);
}

TEST_CASE("ringgrad-run: the token, the launcher's store and --timeout reach the workers") {
  TempDir dir;
  auto r =
      run(probe_job("2", dir, {}, {"--rdzv-conf", "token=s3cret", "--timeout", "7"}), seconds(60));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  for (int rank = 0; rank < 2; ++rank) {
    auto env = read_env_file(dir.path() + "/env." + std::to_string(rank) + ".0");
    CHECK(env["RINGGRAD_STORE_TOKEN"] == "s3cret");
    // Workers are clients of the launcher's store (one store per job), on loopback here.
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(std::stod(env["RINGGRAD_TIMEOUT_S"]) == 7.0);
  }
}

TEST_CASE(
    "ringgrad-run: a second job on a busy c10d endpoint is refused at once, the first runs on") {
  const std::string endpoint = "127.0.0.1:" + std::to_string(reserved_port());
  TempDir dir;
  auto job = [&](const std::string& id, const std::vector<std::string>& program) {
    std::vector<std::string> args = {"--rdzv-backend", "c10d", "--rdzv-endpoint",  endpoint,
                                     "--rdzv-id",      id,     "--nproc-per-node", "1"};
    args.insert(args.end(), program.begin(), program.end());
    return launcher(args);
  };
  // The first job's worker says it has started, then runs until the test lets it finish.
  const std::string started = dir.path() + "/started", go = dir.path() + "/go";
  Child first(job("first", {"sh", "-c",
                            "touch " + started + "; while [ ! -e " + go +
                                " ]; do sleep 0.1; done; echo first done"}));
  for (int i = 0; i < 600 && !std::ifstream(started); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(std::ifstream(started).good());  // the first job hosts the store and runs
  auto second = run(job("second", {"true"}), seconds(20));
  const std::string error = launcher_error(second, 2);
  CHECK(error.find("serves job 'first', not --rdzv-id 'second'") != std::string::npos);
  std::ofstream(go) << "1";
  auto r = first.wait(seconds(30));
  CHECK_MESSAGE(r.status.ok(), r.err);
  CHECK(r.out.find("first done") != std::string::npos);
}

TEST_CASE("ringgrad-run: --log-dir never writes over an earlier run's logs, and is checked first") {
  TempDir logs;
  auto once = [&] {
    return run(launcher({"--standalone", "--nproc-per-node", "1", "--redirects", "1", "--log-dir",
                         logs.path(), "--rdzv-id", "same", "--", "sh", "-c", "echo run-$$"}),
               seconds(30));
  };
  auto first = once();
  REQUIRE_MESSAGE(first.status.ok(), first.err);
  auto second = once();
  REQUIRE_MESSAGE(second.status.ok(), second.err);
  auto line_of = [](const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string a = line_of(logs.path() + "/same/attempt_0/0/stdout.log");
  const std::string b = line_of(logs.path() + "/same.1/attempt_0/0/stdout.log");
  CHECK(a.rfind("run-", 0) == 0);
  CHECK(b.rfind("run-", 0) == 0);
  CHECK(a != b);  // two runs, two folders

  std::ofstream(logs.path() + "/file") << "x";
  auto bad = run(launcher({"--standalone", "--nproc-per-node", "1", "--log-dir",
                           logs.path() + "/file/sub", "true"}),
                 seconds(10));
  CHECK(bad.status.code == 2);
  CHECK(lines_with(bad.err, "ringgrad-run: error: --log-dir").size() == 1);
}

namespace {
// Two probe workers all-reducing 1200 times, 100 ms apart, with the job's store alive.
std::vector<std::string> ring_job(const TempDir& dir, std::vector<std::string> launcher_args) {
  std::vector<std::string> args = {"--standalone", "--nproc-per-node", "2", "--stop-grace", "2"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.insert(args.end(), {probe_path(), "--out", dir.path(), "--allreduces", "1200"});
  return launcher(args);
}

// Waits until every one of `ranks` workers of a probe job has formed its ring group.
bool all_joined(const TempDir& dir, int ranks) {
  for (int i = 0; i < 1200 && count_files(dir.path(), "joined.") < ranks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return count_files(dir.path(), "joined.") == ranks;
}

// The local address of the socket listening on `port` (from /proc/net/tcp), e.g. "0100007F"
// for 127.0.0.1; "" when nothing listens there over IPv4.
std::string listening_address(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  char hex_port[8];
  std::snprintf(hex_port, sizeof hex_port, "%04X", port);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "0A" && local.substr(local.find(':') + 1) == hex_port)
      return local.substr(0, local.find(':'));
  }
  return "";
}
}  // namespace

TEST_CASE("ringgrad-run: --timeout S brings down a job with a frozen worker after S seconds") {
  TempDir dir;
  Child job(ring_job(dir, {"--timeout", "3"}));
  REQUIRE(all_joined(dir, 2));
  // Alive but silent: only the collective timeout can notice (without --timeout: 600 s).
  ::kill(pid_in(dir.path() + "/pid.1.0"), SIGSTOP);
  // "3 s" or "3001 ms", where the default would have waited 10 min.
  check_job_failed(
      job.wait(seconds(60)), dir,
      {"first failure: rank 0", "on rank 0 timed out after 3", "receiving from rank 1"});
}

TEST_CASE(
    "ringgrad-run: the workers' store listens on loopback under --standalone, token required") {
  TempDir dir;
  Child job(ring_job(dir, {"--rdzv-conf", "token=s3cret"}));
  REQUIRE(all_joined(dir, 2));
  const int port = std::stoi(read_env_file(dir.path() + "/env.0.0")["MASTER_PORT"]);
  CHECK(listening_address(port) == "0100007F");  // 127.0.0.1, not 0.0.0.0
  comm::TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = std::chrono::milliseconds(5000);
  std::string refusal;
  try {
    comm::TcpStore stranger(o);  // no token
  } catch (const IoError& e) {
    refusal = e.what();
  }
  CHECK(refusal.find("token") != std::string::npos);
  o.token = "s3cret";
  comm::TcpStore member(o);  // the launcher's token opens it: it was the workers' store
  job.signal(SIGTERM);
  auto r = job.wait(seconds(30));
  CHECK(r.status.code == 128 + SIGTERM);
}

TEST_CASE("ringgrad-run: values that would fail later or silently are refused up front, readably") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
    std::map<std::string, std::string> env;
  };
  const std::vector<Case> cases = {
      {{"--rdzv-conf", "timeout=nan"}, "timeout=nan: need a finite number of seconds above 0", {}},
      {{"--rdzv-conf", "timeout=1e300"}, "up to 10000000", {}},
      {{"--rdzv-conf", "keep_alive_timeout=0"}, "above 0", {}},
      {{"--rdzv-conf", "bind_addr=my-host"}, "bind_addr=my-host: not an IPv4 address", {}},
      {{"--master-addr", "127.0.0.1:5"}, "'127.0.0.1:5' is not a host name or IPv4 address", {}},
      {{"--ssh-port", "70000"}, "--ssh-port: must be a whole number from 1 to 65535", {}},
      {{"--check-port", "-5"}, "--check-port: must be a whole number from 1 to 65535", {}},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]:29400"},
       "IPv6 endpoints are not supported yet; use an IPv4 address or a host name",
       {}},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29734:5"}, "more than one ':'", {}},
      {{"--node-rank", "-1"}, "--node-rank: must be a whole number from 0 to 99999, got '-1'", {}},
      {{"--node-rank", "2.5"},
       "--node-rank: must be a whole number from 0 to 99999, got '2.5'",
       {}},
      {{"--master-port", "1e3"}, "--master-port: must be a whole number from 0 to 65535", {}},
      {{"--nproc-per-node", "100000"}, "need a count from 1 to 1024", {}},
      {{"--max-restarts", "1e400"}, "--max-restarts: must be a whole number from 0 to 10000", {}},
      {{"--nnodes", "2", "--node-rank", "0", "--monitor-interval", "60"},
       "--monitor-interval 60 s: a node checks in once per interval",
       {}},
      {{"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0"},
       "picks a port on one host only",
       {}},
      {{"--rdzv-id", "../elsewhere", "--log-dir", "/tmp"},
       "--rdzv-id '../elsewhere': give a name",
       {}},
      {{"--rdzv-id", ""}, "--rdzv-id '': give a name", {}},
      {{"--rdzv-id", ".."}, "other than '.' and '..'", {}},
      {{"--standalone"}, "RINGGRAD_STORE_TOKEN is set but empty", {{"RINGGRAD_STORE_TOKEN", ""}}},
      {{"--standalone"},
       "RINGGRAD_STORE_MAX_MB='0' must be a whole number from 1 to",
       {{"RINGGRAD_STORE_MAX_MB", "0"}}},
  };
  for (const auto& c : cases) {
    auto args = c.args;
    args.push_back("true");
    CAPTURE(args[0]);
    CAPTURE(args[1]);
    auto r = run(launcher(args), seconds(20), c.env);
    const std::string error = launcher_error(r, 2);
    CHECK_MESSAGE(error.find(c.says) != std::string::npos, error);
    CHECK(error.size() < 240);                        // a sentence, not a 309-digit limit
    CHECK(error.find(".cpp:") == std::string::npos);  // no source locations for users
  }
}

TEST_CASE(
    "ringgrad-run: a program that cannot start is named in the summary, without source lines") {
  // Found missing before anything starts: one line, exit 2.
  auto r = run(launcher({"--standalone", "/nonexistent/prog"}), seconds(30));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 2);
  CHECK(r.err.find("ringgrad-run: error: cannot run '/nonexistent/prog': no such file") !=
        std::string::npos);
  CHECK(r.err.find(".cpp:") == std::string::npos);
  // Found only by exec: a script whose #! interpreter is missing. The file is there, so the
  // summary does not say "No such file or directory".
  TempDir dir;
  const std::string script = dir.path() + "/bad_interpreter";
  std::ofstream(script) << "#!/nonexistent/python\n";
  ::chmod(script.c_str(), 0755);
  r = run(launcher({"--standalone", script}), seconds(30));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 1);
  CHECK(r.err.find("| cannot run '" + script + "': the interpreter its first line (#!) names " +
                   "was not found") != std::string::npos);
  CHECK(r.err.find(".cpp:") == std::string::npos);
}
