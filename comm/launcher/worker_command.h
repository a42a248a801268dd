// WorkerCommand: what each worker executes, decided as torchrun decides it. A script runs with
// the Python on PATH as `python -u SCRIPT` (-m: `python -u -m MODULE`, --run-path: through
// runpy in a fresh interpreter, --no-python: exec'd as it is), and torch.distributed.launch's
// convention puts `--local-rank=N` after the script unless --use-env. Resolved once per node
// before anything starts, so a program that cannot run is one line naming it and why.
#pragma once
#include <string>
#include <vector>

namespace ringgrad::comm {

enum class Invocation {
  automatic,   // a Python script with Python, an executable as it is (see resolve_...)
  python,      // (resolved) python -u SCRIPT
  module,      // -m: python -u -m MODULE
  executable,  // --no-python: exec'd directly
  run_path,    // --run-path: runpy.run_path(SCRIPT) in a fresh interpreter
};

// torchrun passes the local rank in the environment only; torch.distributed.launch also as an
// argument unless --use-env (PyTorch >= 2.0 spells it --local-rank, 1.x --local_rank).
enum class LaunchConvention { torchrun, launch, launch_1x };

struct WorkerCommand {
  std::vector<std::string> head;  // the interpreter and the program: {python, -u, train.py}
  std::vector<std::string> tail;  // the program's own arguments
  std::string local_rank_flag;    // "--local-rank" (legacy convention), or empty

  // The complete argv of local rank `local_rank`.
  std::vector<std::string> argv(int local_rank) const;
};

// `program_and_args` is PROGRAM [ARGS...] from the command line; `path` and `python_exec` are
// $PATH and $PYTHON_EXEC (torchrun's override of the interpreter). Automatic mode runs PROGRAM
// with Python when it ends in .py or is a file that is not executable (what torchrun runs with
// Python), and execs it when it is an executable file or found on PATH (where torchrun would
// need --no-python). Throws InvalidArgument naming the program, or the Python, that cannot run.
WorkerCommand resolve_worker_command(Invocation invocation, LaunchConvention convention,
                                     bool use_env, const std::vector<std::string>& program_and_args,
                                     const std::string& path, const std::string& python_exec);

// Where `name` (no '/') is found on `path` as an executable file; empty if nowhere.
std::string find_on_path(const std::string& name, const std::string& path);

}  // namespace ringgrad::comm
