// Integration-test harness implementation.
#include "tests/integration/launch_harness.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace ringgrad::testing {

using Clock = std::chrono::steady_clock;

Child::Child(std::vector<std::string> command,
             const std::map<std::string, std::string>& extra_env) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    env[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
  }
  for (const auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> list;
  for (const auto& [k, v] : env) list.push_back(k + "=" + v);
  process_ = std::make_unique<comm::WorkerProcess>(command, list);
}

Child::~Child() = default;  // WorkerProcess SIGKILLs the group if it is still running

void Child::signal(int sig) const { ::kill(process_->pid(), sig); }

RunResult Child::wait(std::chrono::seconds deadline) {
  RunResult r;
  const auto end = Clock::now() + deadline;
  auto drain = [&](int fd, std::string& into, bool is_out) {
    char buf[8192];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) into.append(buf, static_cast<size_t>(n));
    if (n == 0) is_out ? process_->close_stdout() : process_->close_stderr();
  };
  for (;;) {
    std::vector<pollfd> fds;
    if (process_->stdout_fd() >= 0) fds.push_back({process_->stdout_fd(), POLLIN, 0});
    if (process_->stderr_fd() >= 0) fds.push_back({process_->stderr_fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    if (process_->stdout_fd() >= 0) drain(process_->stdout_fd(), r.out, true);
    if (process_->stderr_fd() >= 0) drain(process_->stderr_fd(), r.err, false);
    if (auto status = process_->poll_exit()) {
      r.status = *status;
      return r;
    }
    if (Clock::now() > end) {
      r.timed_out = true;
      process_->signal_group(SIGKILL);
      while (!process_->poll_exit()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      r.status = *process_->poll_exit();
      return r;
    }
  }
}

RunResult run(std::vector<std::string> command, std::chrono::seconds deadline,
              const std::map<std::string, std::string>& extra_env) {
  Child child(std::move(command), extra_env);
  return child.wait(deadline);
}

std::vector<std::string> launcher(std::vector<std::string> args) {
  args.insert(args.begin(), RINGGRAD_RUN_PATH);
  return args;
}

std::string probe_path() { return WORKER_PROBE_PATH; }

bool pid_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');  // the state letter follows "(comm)"
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

bool all_gone(const std::vector<pid_t>& pids, std::chrono::seconds within) {
  const auto end = Clock::now() + within;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any = any || pid_alive(p);
    if (!any) return true;
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ringgrad-it-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> vars;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

std::vector<pid_t> read_pids(const std::string& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      std::ifstream in(entry.path());
      pid_t p = 0;
      if (in >> p) pids.push_back(p);
    }
  return pids;
}

int count_files(const std::string& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    n += entry.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

std::string launcher_error(const RunResult& r, int exit_code) {
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == exit_code);
  const std::vector<std::string> errors = lines_with(r.err, "ringgrad-run: error:");
  REQUIRE_MESSAGE(errors.size() == 1, r.err);
  return errors[0];
}

}  // namespace ringgrad::testing
