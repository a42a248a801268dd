// Fault tests with real processes: a rank SIGKILLed in the middle of a 256 MiB all-reduce
// makes every surviving rank fail with the peer-closed error (not the 60 s timeout), over the
// unix sockets that connect ranks on one host and over TCP; a rank that may not create unix
// sockets still joins, over TCP.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "tests/skip.h"

extern char** environ;

namespace ringgrad::comm::testing {

namespace {

pid_t start_worker(int port, int rank, int world, int64_t count, const std::string& err_path,
                   bool no_unix_sockets = false) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {RING_FAULT_WORKER, std::to_string(port), std::to_string(rank),
                                   std::to_string(world), std::to_string(count)};
  if (no_unix_sockets) args.push_back("no-unix-sockets");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, RING_FAULT_WORKER, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits up to `limit` for `pid`; returns its wait status, or kills it and returns -1.
int wait_bounded(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Three workers all-reduce 256 MiB twenty times; rank 1 is SIGKILLed inside.
void kill_one_rank_mid_allreduce() {
  TcpStoreServer server(TcpStoreServerOptions{});
  TcpStoreOptions so;
  so.port = server.port();
  TcpStore store(so);
  const int world = 3;
  const int64_t count = 64 << 20;  // 256 MiB of float
  std::vector<pid_t> pids;
  std::vector<std::string> errs;
  for (int r = 0; r < world; ++r) {
    errs.push_back("/tmp/ring_fault_" + std::to_string(getpid()) + "_" + std::to_string(r) + ".err");
    pids.push_back(start_worker(server.port(), r, world, count, errs.back()));
  }
  store.wait({"started/0", "started/1", "started/2"}, Milliseconds(60000));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside the 20 all-reduces
  kill(pids[1], SIGKILL);
  waitpid(pids[1], nullptr, 0);
  for (int r : {0, 2}) {
    const int status = wait_bounded(pids[r], std::chrono::seconds(30));
    const std::string err = read_file(errs[r]);
    CAPTURE(r);
    CAPTURE(err);
    CHECK(status != -1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(err.find("closed the connection during allreduce") != std::string::npos);
    CHECK(err.find("rank 1 (") != std::string::npos);
    CHECK(err.find("timed out") == std::string::npos);
  }
  for (const auto& e : errs) std::remove(e.c_str());
}

}  // namespace

TEST_CASE("a rank SIGKILLed mid all-reduce: every survivor fails with the peer-closed error") {
  for (const char* transport : {"auto", "tcp"}) {  // auto: unix sockets, as the ranks share a host
    CAPTURE(transport);
    ::setenv("RINGGRAD_TRANSPORT", transport, 1);  // the workers inherit it
    kill_one_rank_mid_allreduce();
    ::unsetenv("RINGGRAD_TRANSPORT");
  }
}

TEST_CASE("a rank that may not create unix sockets reaches its peers over TCP, they keep theirs") {
  TcpStoreServer server(TcpStoreServerOptions{});
  const int world = 3;
  std::vector<pid_t> pids;
  std::vector<std::string> errs;
  for (int r = 0; r < world; ++r) {  // rank 0 runs under a seccomp filter that refuses AF_UNIX
    errs.push_back("/tmp/ring_no_unix_" + std::to_string(getpid()) + "_" + std::to_string(r) + ".err");
    pids.push_back(start_worker(server.port(), r, world, 1 << 20, errs.back(), r == 0));
  }
  std::vector<int> status = {wait_bounded(pids[0], std::chrono::seconds(60))};
  const bool no_seccomp = WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 4;
  for (int r = 1; r < world; ++r) {
    if (no_seccomp) kill(pids[r], SIGKILL);  // they would wait for rank 0 until their timeout
    status.push_back(wait_bounded(pids[r], std::chrono::seconds(60)));
  }
  std::vector<std::string> err;
  for (const auto& e : errs) err.push_back(read_file(e));
  for (const auto& e : errs) std::remove(e.c_str());
  if (no_seccomp) return ringgrad::testing::skip_test(err[0]);  // the worker said "no seccomp: ..."
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CAPTURE(err[r]);
    CHECK(status[r] != -1);
    CHECK(WIFEXITED(status[r]));
    CHECK(WEXITSTATUS(status[r]) == 0);
  }
  // Rank 0 says why it is on TCP; ranks 1 and 2 see its "-" and never try a unix connect to it.
  CHECK(err[0].find("peers on this host use TCP") != std::string::npos);
  CHECK(err[1].find("instead") == std::string::npos);
  CHECK(err[2].find("instead") == std::string::npos);
}

}  // namespace ringgrad::comm::testing
