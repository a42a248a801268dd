// SshLaunch implementation: build each host's ssh command, then one poll loop that pumps every
// session's output and decides when the job is over.
#include "comm/launcher/ssh/ssh_launch.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <memory>
#include <optional>

#include "comm/launcher/network_probe.h"
#include "comm/launcher/signal_watcher.h"
#include "comm/launcher/worker_process.h"
#include "core/error.h"
#include "core/hostname.h"
#include "core/logging.h"

extern char** environ;

namespace ringgrad::comm {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Printed by the remote shell once it has logged in, found the directory and the binary.
// Whatever a session says on stderr before it is SSH's (or the shell's) own message, which
// becomes the one error line for that host instead of being streamed.
constexpr const char* kConnectedMarker = "ringgrad-run: ssh session ready";
// After one host failed, the others normally end by themselves (they share the job's store);
// only then are their sessions closed, so their own summary is not cut short.
constexpr milliseconds kPeerGrace{5'000};
// After a session's stdin is closed its launcher stops its workers (stop_grace) and exits;
// beyond this extra time the ssh client is killed.
constexpr milliseconds kSessionGrace{5'000};

std::string env_value(const std::vector<std::string>& environment, const std::string& name) {
  for (const auto& entry : environment)
    if (entry.compare(0, name.size() + 1, name + "=") == 0) return entry;
  RG_THROW(InvalidArgument, "--export ", name, ": not set in this environment");
}

// One SSH session: its ssh client process and what it has said so far.
struct Session {
  std::string host;
  size_t node = 0;
  std::unique_ptr<WorkerProcess> ssh;
  std::string partial[3];              // incomplete line per stream (1 stdout, 2 stderr)
  bool connected = false;              // the marker has arrived
  std::vector<std::string> early_err;  // stderr before the marker: SSH's own words
  std::optional<ExitStatus> status;    // once the client has ended and both pipes are closed

  void emit(int stream, const std::string& line) {
    if (!connected) {
      if (stream == 1 && line == kConnectedMarker) {
        connected = true;
        for (const auto& l : early_err) print(2, l);  // a login banner, say: no error after all
        early_err.clear();
      } else if (stream == 2) {
        early_err.push_back(line);
      } else {
        print(stream, line);
      }
      return;
    }
    print(stream, line);
  }
  // Worker lines already carry "[host:rank]: " (the remote launcher's --console-label); the
  // launcher's own lines get "[host]: ".
  void print(int stream, const std::string& line) const {
    const std::string labelled = "[" + host + ":";
    std::string out =
        line.compare(0, labelled.size(), labelled) == 0 ? line : "[" + host + "]: " + line;
    out += '\n';
    const int fd = stream == 1 ? STDOUT_FILENO : STDERR_FILENO;
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a closed console must not stop the job
      done += static_cast<size_t>(n);
    }
  }
  // Reads what is there; false once the stream has ended.
  bool pump(int stream) {
    const int fd = stream == 1 ? ssh->stdout_fd() : ssh->stderr_fd();
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        std::string& p = partial[stream];
        p.append(buf, static_cast<size_t>(n));
        size_t start = 0;
        for (size_t nl; (nl = p.find('\n', start)) != std::string::npos; start = nl + 1)
          emit(stream, p.substr(start, nl - start));
        p.erase(0, start);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (!partial[stream].empty()) emit(stream, partial[stream]);
      partial[stream].clear();
      stream == 1 ? ssh->close_stdout() : ssh->close_stderr();
      return false;
    }
  }
  bool finished() {
    if (!status && ssh->stdout_fd() < 0 && ssh->stderr_fd() < 0) status = ssh->poll_exit();
    return status.has_value();
  }
  // The one line for a host that failed.
  std::string failure_line() const {
    std::string what = str_cat("host '", host, "' (node ", node, ")");
    if (connected) return str_cat(what, ": its ringgrad-run ended with ", status->describe());
    std::string said;
    for (const auto& l : early_err) said += (said.empty() ? "" : " / ") + l;
    if (said.empty()) said = "(it printed nothing)";
    return str_cat(what, ": ssh ended with ", status->describe(),
                   " before the job started: ", said);
  }
};

}  // namespace

std::string shell_quote(const std::string& word) {
  std::string q = "'";
  for (char ch : word) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string master_address(const std::vector<HostfileEntry>& hosts) {
  RG_CHECK(!hosts.empty(), "master_address: no hosts");
  const bool all_loopback = [&] {
    for (const auto& h : hosts)
      if (!is_loopback_host(h.host)) return false;
    return true;
  }();
  if (!is_loopback_host(hosts[0].host) || all_loopback) return hosts[0].host;
  return hostname();
}

std::vector<std::string> ssh_command(const SshLaunchConfig& c, size_t node,
                                     const std::vector<std::string>& environment) {
  RG_CHECK_LT(node, c.hosts.size(), "ssh_command: node out of range");
  const HostfileEntry& h = c.hosts[node];
  std::vector<std::string> remote = {c.remote_binary,
                                     "--nnodes",
                                     str_cat(c.hosts.size()),
                                     "--node-rank",
                                     str_cat(node),
                                     "--nproc-per-node",
                                     str_cat(h.slots),
                                     "--master-addr",
                                     master_address(c.hosts),
                                     "--master-port",
                                     str_cat(c.master_port),
                                     "--console-label",
                                     h.host,
                                     "--stop-on-stdin-eof"};
  remote.insert(remote.end(), c.launcher_flags.begin(), c.launcher_flags.end());
  remote.push_back("--");
  remote.insert(remote.end(), c.command.begin(), c.command.end());
  std::string line =
      str_cat("cd ", shell_quote(c.remote_workdir), " && if [ ! -x ", shell_quote(c.remote_binary),
              " ]; then echo ", shell_quote(c.remote_binary + ": no such executable on this host"),
              " >&2; exit 127; fi && echo ", shell_quote(kConnectedMarker), " && exec env");
  for (const auto& name : c.export_vars) line += " " + shell_quote(env_value(environment, name));
  for (const auto& word : remote) line += " " + shell_quote(word);
  // BatchMode first (ssh keeps the first value of an option): a password prompt would hang.
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  argv.insert(argv.end(), c.ssh_opts.begin(), c.ssh_opts.end());
  argv.insert(argv.end(), {"-o", "LogLevel=ERROR"});  // no "Permanently added" chatter
  if (c.ssh_port > 0) argv.insert(argv.end(), {"-p", str_cat(c.ssh_port)});
  argv.insert(argv.end(), {h.host, line});
  return argv;
}

int run_ssh_launch(const SshLaunchConfig& c) {
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.emplace_back(*e);
  std::vector<std::vector<std::string>> commands;  // built first: a bad --export starts nothing
  for (size_t node = 0; node < c.hosts.size(); ++node)
    commands.push_back(ssh_command(c, node, environment));
  log_info("starting ", c.hosts.size(), " hosts over SSH, master ", master_address(c.hosts), ":",
           c.master_port);

  SignalWatcher signals;  // Ctrl-C reaches only us: each ssh client leads its own group
  std::vector<Session> sessions(c.hosts.size());
  for (size_t node = 0; node < c.hosts.size(); ++node) {
    sessions[node].host = c.hosts[node].host;
    sessions[node].node = node;
    sessions[node].ssh = std::make_unique<WorkerProcess>(commands[node], environment, true);
  }

  std::optional<size_t> first_failure;
  int stop_signal = 0;
  std::optional<Clock::time_point> close_at, kill_at;  // set once the job is ending
  for (;;) {
    std::vector<pollfd> fds = {{signals.wake_fd(), POLLIN, 0}};
    for (auto& s : sessions)
      for (int fd : {s.ssh->stdout_fd(), s.ssh->stderr_fd()})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    signals.drain();
    bool all_done = true;
    for (auto& s : sessions) {
      if (s.ssh->stdout_fd() >= 0) s.pump(1);
      if (s.ssh->stderr_fd() >= 0) s.pump(2);
      if (!s.finished()) {
        all_done = false;
        continue;
      }
      if (!s.status->ok() && !first_failure && !stop_signal) {
        first_failure = s.node;
        // A session that never got going leaves the others waiting in the rendezvous.
        close_at = Clock::now() + (s.connected ? kPeerGrace : milliseconds(0));
      }
    }
    if (all_done) break;
    if (signals.stop_signal() && !stop_signal) {
      stop_signal = signals.stop_signal();
      log_warn("received ", signal_name(stop_signal), ": stopping every host");
      close_at = Clock::now();
    }
    if (close_at && Clock::now() >= *close_at && !kill_at) {
      for (auto& s : sessions) s.ssh->close_stdin();
      kill_at = Clock::now() + c.stop_grace + kSessionGrace;
    }
    if (kill_at && Clock::now() >= *kill_at) {
      for (auto& s : sessions)
        if (!s.finished()) {
          log_warn("host '", s.host, "' did not end its session in time: killing its ssh client");
          s.ssh->signal_group(SIGKILL);
        }
      kill_at = Clock::time_point::max();
    }
  }
  if (stop_signal) return 128 + stop_signal;
  if (!first_failure) return 0;
  std::fprintf(stderr, "ringgrad-run: error: %s\n",
               sessions[*first_failure].failure_line().c_str());
  return 1;
}

}  // namespace ringgrad::comm
