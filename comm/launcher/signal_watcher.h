// SignalWatcher: turns the stop signals (a request to stop the job: SIGINT, SIGTERM, SIGHUP, or
// ringgrad-run's --signals-to-handle) and SIGCHLD (a worker ended) into bytes on a pipe the
// launcher's poll loop watches (the self-pipe trick), so no work happens inside a signal
// handler. One per process; restores the old handlers.
#pragma once
#include <csignal>
#include <vector>

#include "core/unique_fd.h"

namespace ringgrad::comm {

class SignalWatcher {
 public:
  explicit SignalWatcher(const std::vector<int>& stop_signals = {SIGINT, SIGTERM, SIGHUP});
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  int wake_fd() const;      // readable after any watched signal
  void drain();             // empties the pipe
  int stop_signal() const;  // the last stop signal received, 0 if none

 private:
  std::vector<int> signals_;  // the stop signals, then SIGCHLD
  std::vector<struct sigaction> old_;
  UniqueFd read_end_, write_end_;  // the pipe
};

}  // namespace ringgrad::comm
