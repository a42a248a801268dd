// Fault tests with real processes: a rank SIGKILLed in the middle of a 256 MiB all-reduce
// makes every surviving rank fail with the peer-closed error (not the 60 s timeout), over the
// shared memory and the unix sockets that connect ranks on one host and over TCP; a rank that
// may not create unix sockets still joins, over TCP; a tiny /dev/shm does not matter (the
// segments are memfds), and a rank whose shared memory does not fit falls back to unix sockets.
// No test leaves anything in /dev/shm.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "tests/skip.h"

extern char** environ;

namespace ringgrad::comm::testing {

namespace {

// `mode`: ring_fault_worker's fifth argument ("" for none).
pid_t start_worker(int port, int rank, int world, int64_t count, const std::string& err_path,
                   const std::string& mode = "") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> args = {RING_FAULT_WORKER, std::to_string(port), std::to_string(rank),
                                   std::to_string(world), std::to_string(count)};
  if (!mode.empty()) args.push_back(mode);
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

std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  std::error_code ignored;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ignored))
    names.insert(e.path().filename());
  return names;
}

// Three workers on one host, rank r in `modes[r]`; returns each one's wait status (-1: it hung
// and was killed) and stderr.
struct Outcome {
  std::vector<int> status;
  std::vector<std::string> err;
};
Outcome run_three(const std::vector<std::string>& modes, const std::string& tag) {
  TcpStoreServer server(TcpStoreServerOptions{});
  std::vector<pid_t> pids;
  std::vector<std::string> paths;
  for (int r = 0; r < 3; ++r) {
    paths.push_back("/tmp/ring_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(r) +
                    ".err");
    pids.push_back(start_worker(server.port(), r, 3, 1 << 20, paths.back(), modes[r]));
  }
  Outcome out;
  for (int r = 0; r < 3; ++r) {
    // A worker that could not prepare (exit 4) leaves the others waiting for it: end them.
    out.status.push_back(wait_bounded(pids[r], std::chrono::seconds(60)));
    if (WIFEXITED(out.status.back()) && WEXITSTATUS(out.status.back()) == 4)
      for (int other = r + 1; other < 3; ++other) kill(pids[other], SIGKILL);
  }
  for (const auto& p : paths) out.err.push_back(read_file(p)), std::remove(p.c_str());
  return out;
}

// The reason a worker gave for exit 4 (it could not prepare its surroundings), or "".
std::string could_not_prepare(const Outcome& o) {
  for (size_t r = 0; r < o.status.size(); ++r)
    if (WIFEXITED(o.status[r]) && WEXITSTATUS(o.status[r]) == 4) return o.err[r];
  return "";
}

void check_all_succeeded(const Outcome& o) {
  for (size_t r = 0; r < o.status.size(); ++r) {
    CAPTURE(r);
    CAPTURE(o.err[r]);
    CHECK(o.status[r] != -1);
    CHECK(WIFEXITED(o.status[r]));
    CHECK(WEXITSTATUS(o.status[r]) == 0);
  }
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
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
    errs.push_back("/tmp/ring_fault_" + std::to_string(getpid()) + "_" + std::to_string(r) +
                   ".err");
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
  const auto before = dev_shm_entries();
  for (const char* transport : {"shm", "unix", "tcp"}) {  // the ranks share a host
    CAPTURE(transport);
    ::setenv("RINGGRAD_TRANSPORT", transport, 1);  // the workers inherit it
    kill_one_rank_mid_allreduce();
    ::unsetenv("RINGGRAD_TRANSPORT");
  }
  CHECK(dev_shm_entries() == before);  // a killed rank leaves no segment behind
}

TEST_CASE(
    "a rank that may not create unix sockets reaches its peers over TCP, they keep shared memory") {
  const Outcome o = run_three({"no-unix-sockets", "", ""}, "no_unix");
  if (!could_not_prepare(o).empty()) return ringgrad::testing::skip_test(could_not_prepare(o));
  check_all_succeeded(o);
  // Rank 0 says why it is on TCP; ranks 1 and 2 see its "-" and never try a unix connect to it.
  CHECK(has(o.err[0], "peers on this host use TCP"));
  CHECK(has(o.err[0], "links: tcp to 1,2"));
  CHECK(has(o.err[1], "links: shm to 2; tcp to 0"));  // one group, two transports
  CHECK(has(o.err[2], "links: shm to 1; tcp to 0"));
  CHECK_FALSE(has(o.err[1], "instead"));
  CHECK_FALSE(has(o.err[2], "instead"));
}

TEST_CASE(
    "a 64 KiB /dev/shm does not matter: the ranks still share memory, and none is left there") {
  const Outcome o = run_three({"tiny-dev-shm", "tiny-dev-shm", "tiny-dev-shm"}, "tiny_shm");
  if (!could_not_prepare(o).empty())
    return ringgrad::testing::skip_test(
        "cannot mount a tmpfs in a private mount namespace here (needs root): " +
        could_not_prepare(o));
  check_all_succeeded(o);
  for (int r = 0; r < 3; ++r) CHECK(has(o.err[r], "links: shm to "));
}

TEST_CASE(
    "shared memory that does not fit: that rank warns with needed and available, its peers reach "
    "it over unix sockets") {
  const auto before = dev_shm_entries();
  const Outcome o = run_three({"file-size-limit", "", ""}, "no_room");
  if (!could_not_prepare(o).empty()) return ringgrad::testing::skip_test(could_not_prepare(o));
  check_all_succeeded(o);
  CHECK(has(o.err[0], "cannot reserve 2.0 MiB of shared memory"));
  CHECK(has(o.err[0], "the file size limit (ulimit -f) is 64.0 KiB"));
  CHECK(has(o.err[0], "they use unix sockets instead"));
  CHECK(has(o.err[0], "links: unix to 1,2"));
  CHECK(has(o.err[1], "links: shm to 2; unix to 0"));
  CHECK(has(o.err[2], "links: shm to 1; unix to 0"));
  CHECK(dev_shm_entries() == before);
}

}  // namespace ringgrad::comm::testing
