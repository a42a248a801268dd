// WorkerProcess: one launched worker, owned RAII. The child leads its own process group (so
// the whole tree it spawns can be signalled at once) and has PR_SET_PDEATHSIG = SIGKILL (so it
// dies with the launcher, even a kill -9'd one). stdout and stderr arrive on non-blocking pipes;
// stdin is inherited, or (stdin_pipe) a pipe the owner writes and closes; no other descriptor
// of the launcher is inherited.
// The destructor SIGKILLs the group and reaps the child if it is still there.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/unique_fd.h"

namespace ringgrad::comm {

// How a process ended: an exit code, or the signal that killed it; or, for a worker the
// launcher ended because it stayed stopped, the signal that stopped it.
struct ExitStatus {
  int code = 0;
  int signal = 0;       // non-zero: killed by this signal
  int stop_signal = 0;  // non-zero: stopped by this signal (SIGSTOP, SIGTSTP, ...) and frozen
  bool ok() const { return signal == 0 && code == 0 && stop_signal == 0; }
  // "exit code 3" / "signal SIGKILL" / "stopped by SIGSTOP"
  std::string describe() const;
};

std::string signal_name(int signal);  // "SIGSEGV"; "signal 77" when unknown

// Kills (SIGKILL) and reaps every child this process has left: once the workers are reaped,
// those are processes they left behind that this process (a child subreaper) adopted, even
// ones that left the workers' process groups with setsid. Repeats while their own children
// come over, for at most `within`.
void kill_adopted_orphans(std::chrono::milliseconds within);

class WorkerProcess {
 public:
  // `env` is the complete environment ("KEY=VALUE"). Throws Error naming the program when it
  // cannot be started (not found, not executable).
  WorkerProcess(const std::vector<std::string>& command, const std::vector<std::string>& env,
                bool stdin_pipe = false);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return stdout_.get(); }  // -1 once closed
  int stderr_fd() const { return stderr_.get(); }
  void close_stdout();
  void close_stderr();
  void close_stdin();  // the child reads end-of-file

  // Reaps the child if it has ended; the status stays available afterwards. Also notices the
  // child being stopped (job control: SIGSTOP, SIGTSTP, ...; not a debugger's ptrace stop) and
  // continued.
  std::optional<ExitStatus> poll_exit();
  // While the child is stopped: the signal that stopped it and since when.
  struct Stop {
    int signal = 0;
    std::chrono::steady_clock::time_point since;
  };
  const std::optional<Stop>& stopped() const { return stopped_; }
  // Sends `signal` to the worker's whole process group (its children included).
  void signal_group(int signal) const;
  // True while any process of the group is left (a grandchild may outlive the worker).
  bool group_alive() const;
  // Reaps exited grandchildren of this group that were re-parented to the launcher (it is a
  // child subreaper); only once the worker itself has been reaped, so its status is kept.
  void reap_strays();

 private:
  pid_t pid_ = -1;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd stdin_;  // the write end of the child's stdin, with stdin_pipe
  std::optional<ExitStatus> exit_;
  std::optional<Stop> stopped_;
};

}  // namespace ringgrad::comm
