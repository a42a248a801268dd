// WorkerGroup: the workers of one node for one generation. Spawns them, pumps their output,
// notices the first that fails (or stays stopped: a frozen worker would hold every other rank
// in its collective until the timeout), and stops them all: the given signal to every process
// group, then SIGKILL for whatever is left after the grace period. Single-threaded: the
// launcher calls poll() in its monitor loop.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "comm/launcher/job_event.h"
#include "comm/launcher/worker_output.h"
#include "comm/launcher/worker_process.h"

namespace ringgrad::comm {

struct WorkerSpec {
  int global_rank = 0;
  int local_rank = 0;
  std::vector<std::string> command;  // argv
  std::vector<std::string> env;      // complete, "KEY=VALUE"
  std::string error_file;  // its TORCHELASTIC_ERROR_FILE: made ready before it starts, read
                           // when it fails
  WorkerOutputConfig output;
};

class WorkerGroup {
 public:
  enum class State { running, succeeded, failed };

  // A worker that cannot be started counts as failed with exit code 127 and the reason as
  // its stderr; one stopped (SIGSTOP, SIGTSTP, ...) for `stopped_timeout` counts as failed too.
  WorkerGroup(std::vector<WorkerSpec> specs, std::chrono::milliseconds stopped_timeout);
  ~WorkerGroup();  // stops what is still running (SIGKILL)

  // Waits up to `max_wait` for output, a worker exit, or `wake_fd` becoming readable.
  State poll(std::chrono::milliseconds max_wait, int wake_fd);
  const std::optional<WorkerFailure>& first_failure() const { return first_failure_; }
  // Sends `signal` to every worker's group, waits up to `grace`, then SIGKILLs and reaps all.
  void stop(int signal, std::chrono::milliseconds grace);

 private:
  struct Worker {
    WorkerSpec spec;
    std::unique_ptr<WorkerProcess> process;  // null if it could not start
    std::unique_ptr<WorkerOutput> output;
    bool reported = false;  // its exit has been looked at
  };
  void pump(Worker& w, int fd, int stream);
  void reap(Worker& w);
  void fail_if_frozen(Worker& w);

  std::vector<Worker> workers_;
  std::optional<WorkerFailure> first_failure_;
  std::chrono::milliseconds stopped_timeout_;
  bool stopping_ = false;
};

}  // namespace ringgrad::comm
