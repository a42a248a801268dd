// Harness for the integration tests: runs ringgrad-run (or any program) as a child with a
// deadline, collects its output, kills its process group if the deadline passes, and offers
// the small checks the tests share (is a pid alive, read the probe's files).
#pragma once
#include <doctest/doctest.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/launcher/worker_process.h"
#include "tests/reserved_port.h"

namespace ringgrad::testing {

struct RunResult {
  comm::ExitStatus status;
  std::string out;
  std::string err;
  bool timed_out = false;
};

// A running child: its own process group, killed with it when the test process dies.
class Child {
 public:
  explicit Child(std::vector<std::string> command,
                 const std::map<std::string, std::string>& extra_env = {});
  ~Child();
  pid_t pid() const { return process_->pid(); }
  void signal(int sig) const;  // to the child itself, not its group
  // Collects output until it exits or `deadline` passes (then SIGKILLs the group).
  RunResult wait(std::chrono::seconds deadline);

 private:
  std::unique_ptr<comm::WorkerProcess> process_;
};

RunResult run(std::vector<std::string> command, std::chrono::seconds deadline,
              const std::map<std::string, std::string>& extra_env = {});

// ringgrad-run's argv: {RINGGRAD_RUN, args...}
std::vector<std::string> launcher(std::vector<std::string> args);
std::string probe_path();

bool pid_alive(pid_t pid);  // exists and is not a zombie
// True once every pid has gone, polling up to `within`.
bool all_gone(const std::vector<pid_t>& pids, std::chrono::seconds within);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "KEY=VALUE" lines of a file written by worker_probe.
std::map<std::string, std::string> read_env_file(const std::string& path);
std::vector<pid_t> read_pids(const std::string& dir, const std::string& prefix);
int count_files(const std::string& dir, const std::string& prefix);
// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_with(const std::string& text, const std::string& prefix);
// The one "ringgrad-run: error:" line of a launcher run that ended in time with `exit_code`
// (the test stops unless the run ended and there is exactly one such line).
std::string launcher_error(const RunResult& r, int exit_code);

}  // namespace ringgrad::testing
