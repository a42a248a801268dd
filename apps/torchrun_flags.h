// ringgrad-run's flags for how PROGRAM is invoked and what torchrun-specific settings the
// workers get (-m, --no-python, --run-path, torch.distributed.launch's --use-env, --role,
// --local-addr, ...), and torchrun's flags ringgrad-run refuses, each with the reason, so that
// a torchrun command line either works or says exactly which flag cannot and why.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "comm/launcher/launch_config.h"

namespace ringgrad::cli {

struct InvocationFlags {
  bool module = false, no_python = false, run_path = false;
  std::string convention = "torchrun";
  std::string start_method = "spawn";
  std::string event_log_handler = "null";
};

// Adds the flags to `app`; their values land in `config` and `flags`.
void add_torchrun_flags(CLI::App& app, comm::LaunchConfig& config, InvocationFlags& flags);
// After parsing: -m / --no-python / --run-path and the convention into `config`. Throws
// InvalidArgument for combinations that contradict each other.
void apply_invocation_flags(const InvocationFlags& flags, comm::LaunchConfig& config);

// The flags that --hostfile passes on to every remote ringgrad-run: {name, value} pairs, and
// the names of the value-less flags that were given.
std::vector<std::string> torchrun_flags_for_remote(const CLI::App& app);

}  // namespace ringgrad::cli
