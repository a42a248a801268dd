// SignalWatcher implementation: the handler only stores the signal number and writes a byte.
#include "comm/launcher/signal_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ringgrad::comm {

namespace {
// The pipe's write end as the handler reads it: a plain int (the SignalWatcher owns the
// descriptor), -1 while no watcher exists.
volatile sig_atomic_t g_write_end = -1;
volatile sig_atomic_t g_stop_signal = 0;

void on_signal(int signal) {
  const int saved = errno;
  if (signal != SIGCHLD) g_stop_signal = signal;
  const char byte = static_cast<char>(signal);
  (void)!::write(g_write_end, &byte, 1);
  errno = saved;
}
}  // namespace

SignalWatcher::SignalWatcher(const std::vector<int>& stop_signals) : signals_(stop_signals) {
  signals_.push_back(SIGCHLD);
  old_.resize(signals_.size());
  RG_CHECK(g_write_end < 0, "only one SignalWatcher may exist at a time");
  int ends[2];
  RG_CHECK(::pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2: ", std::strerror(errno));
  read_end_ = UniqueFd(ends[0]);
  write_end_ = UniqueFd(ends[1]);
  g_write_end = ends[1];
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &sa, &old_[i]);
}

SignalWatcher::~SignalWatcher() {
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &old_[i], nullptr);
  g_write_end = -1;  // before the members close the pipe
}

int SignalWatcher::wake_fd() const { return read_end_.get(); }

void SignalWatcher::drain() {
  char buf[64];
  while (::read(read_end_.get(), buf, sizeof buf) > 0) {
  }
}

int SignalWatcher::stop_signal() const { return g_stop_signal; }

}  // namespace ringgrad::comm
