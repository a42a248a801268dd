// SshLaunch: `ringgrad-run --hostfile FILE` as mpirun/DeepSpeed do it. One `ringgrad-run` per
// host is started over SSH (node 0 = the first host, static rendezvous at its address), every
// host's output comes back prefixed with its name, and the first host that fails, or a
// Ctrl-C here, stops every host: closing a session's stdin tells its launcher to stop.
// Contract: run_ssh_launch blocks until every SSH session has ended; all timeouts are bounded.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "comm/launcher/ssh/hostfile.h"

namespace ringgrad::comm {

struct SshLaunchConfig {
  std::vector<HostfileEntry> hosts;
  int ssh_port = 0;                         // 0: ssh's own default
  std::vector<std::string> ssh_opts;        // extra ssh arguments (--ssh-opts, split on spaces)
  std::vector<std::string> export_vars;     // --export: names whose local values are carried over
  std::string remote_workdir;               // cd'ed to on every host (default: ours)
  std::string remote_binary;                // ringgrad-run on every host (default: our path)
  int master_port = 29500;                  // node 0's rendezvous port
  std::vector<std::string> launcher_flags;  // passed on to every remote ringgrad-run
  std::vector<std::string> command;         // PROGRAM and its arguments
  std::chrono::milliseconds stop_grace{5'000};  // the remote launchers' SIGTERM -> SIGKILL
};

// 'it'\''s' -- one word for a POSIX shell, whatever the bytes.
std::string shell_quote(const std::string& word);

// The address every node reaches node 0 at: the first host's name, except that a loopback
// name ("localhost") in a hostfile with other, remote hosts means this machine, which they
// know by its host name.
std::string master_address(const std::vector<HostfileEntry>& hosts);

// The full ssh argv for node `node` (pure: a unit test reads it). `environment` is where
// --export's values come from ("KEY=VALUE"); a name it lacks throws InvalidArgument.
std::vector<std::string> ssh_command(const SshLaunchConfig& config, size_t node,
                                     const std::vector<std::string>& environment);

// Returns ringgrad-run's exit code: 0 when every host succeeded, 128+N after signal N here,
// 1 otherwise (with one line naming the first host that failed and why).
int run_ssh_launch(const SshLaunchConfig& config);

}  // namespace ringgrad::comm
