// SignalWatcher: turns SIGINT, SIGTERM and SIGHUP (a request to stop the job) and SIGCHLD (a
// worker ended) into bytes on a pipe the launcher's poll loop watches (the self-pipe trick),
// so no work happens inside a signal handler. One per process; restores the old handlers.
#pragma once
#include <csignal>

namespace ringgrad::comm {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  int wake_fd() const;      // readable after any watched signal
  void drain();             // empties the pipe
  int stop_signal() const;  // the last SIGINT/SIGTERM/SIGHUP received, 0 if none

 private:
  struct sigaction old_[4];
};

}  // namespace ringgrad::comm
