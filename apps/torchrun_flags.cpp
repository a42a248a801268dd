// torchrun's invocation and worker flags for ringgrad-run (see torchrun_flags.h). Each takes
// torchrun's PET_<NAME> environment variable as its default, as torchrun's do.
#include "apps/torchrun_flags.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace ringgrad::cli {

namespace {

constexpr const char* kRefused = "torchrun's, refused";

// A flag ringgrad-run knows but cannot honour: given, it fails with `reason`.
void refuse(CLI::App& app, const std::string& names, const std::string& reason) {
  app.add_option(names)
      ->description("refused: " + reason)
      ->type_name("VALUE")
      ->check(CLI::Validator(
          [reason](std::string&) { return "ringgrad-run refuses it: " + reason; }, ""))
      ->group(kRefused);
}

// `option` in `group`, with torchrun's PET_<NAME> environment variable as its default (for
// --local-addr: PET_LOCAL_ADDR).
void with_pet_env(CLI::Option* option, const char* group) {
  std::string name = "PET_" + option->get_lnames().front();
  for (char& c : name)
    c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  option->envname(name)->group(group);
}

// The value-less flags and the options --hostfile passes on, as written on a command line.
const char* const kRemoteFlags[] = {"--module", "--no-python", "--run-path", "--use-env",
                                    "--virtual-local-rank"};
const char* const kRemoteOptions[] = {"--launch-convention", "--role",
                                      "--start-method",      "--log-line-prefix-template",
                                      "--signals-to-handle", "--event-log-handler"};

}  // namespace

void add_torchrun_flags(CLI::App& app, comm::LaunchConfig& c, InvocationFlags& f) {
  const char* how = "how PROGRAM runs";
  with_pet_env(
      app.add_flag("-m,--module", f.module, "run PROGRAM as a Python module: python -u -m PROGRAM"),
      how);
  with_pet_env(
      app.add_flag("--no-python,--no_python", f.no_python,
                   "execute PROGRAM directly instead of with python -u (default: .py files and "
                   "files that are not executable run with Python, executables run directly)"),
      how);
  with_pet_env(
      app.add_flag("--run-path,--run_path", f.run_path,
                   "run the script through runpy.run_path in a fresh Python, as torchrun does"),
      how);
  app.add_option("--launch-convention", f.convention,
                 "torchrun (the local rank in LOCAL_RANK only), launch (also --local-rank=N "
                 "after the script, as torch.distributed.launch of PyTorch 2.x) or launch-1.x "
                 "(--local_rank=N, as PyTorch 1.x)")
      ->check(CLI::IsMember({"torchrun", "launch", "launch-1.x"}))
      ->group(how);
  app.add_flag("--use-env,--use_env", c.use_env,
               "torch.distributed.launch's: no --local-rank argument, LOCAL_RANK only (what "
               "--launch-convention torchrun always does)")
      ->group(how);

  const char* worker = "torchrun's worker settings";
  with_pet_env(app.add_option("--role", c.role, "the workers' ROLE_NAME"), worker);
  with_pet_env(
      app.add_option("--local-addr,--local_addr", c.local_addr,
                     "this node's address as the other nodes reach it (node rank 0: MASTER_ADDR; "
                     "default: the address it reaches the rendezvous store from)"),
      worker);
  with_pet_env(
      app.add_option("--log-line-prefix-template,--log_line_prefix_template",
                     c.log_line_prefix_template,
                     "--tee's console prefix with ${role_name} ${rank} ${local_rank} ${hostname} "
                     "(default: [node:rank]: )"),
      worker);
  with_pet_env(
      app.add_option("--signals-to-handle,--signals_to_handle", c.signals_to_handle,
                     "signals that stop the job, forwarded to the workers first; also their "
                     "TORCHELASTIC_SIGNALS_TO_HANDLE"),
      worker);
  with_pet_env(app.add_flag("--virtual-local-rank,--virtual_local_rank", c.virtual_local_rank,
                            "every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES its one GPU"),
               worker);
  with_pet_env(
      app.add_option(
             "--start-method,--start_method", f.start_method,
             "spawn, fork or forkserver: accepted, no effect (every worker is a new process "
             "running PROGRAM, as torchrun's are for a script)")
          ->check(CLI::IsMember({"spawn", "fork", "forkserver"})),
      worker);
  with_pet_env(app.add_option("--event-log-handler,--event_log_handler", f.event_log_handler,
                              "null only (torchrun's other handlers are Python objects)")
                   ->check(CLI::IsMember({"null"})),
               worker);

  refuse(app, "--logs-specs,--logs_specs",
         "it names a Python LogsSpecs class to load from the torchrun.logs_specs entry points, "
         "and ringgrad-run is not Python; --log-dir, --redirects, --tee and --local-ranks-filter "
         "say where the logs go");
  refuse(app, "--numa-binding,--numa_binding",
         "binding workers to the CPUs near their GPU is not implemented; start each worker "
         "under numactl from a wrapper script instead");
  refuse(app, "--duplicate-stdout-filters,--duplicate_stdout_filters",
         "copying matching lines to another file is not implemented; grep the per-worker logs "
         "of --log-dir with --tee 3 instead");
  refuse(app, "--duplicate-stderr-filters,--duplicate_stderr_filters",
         "copying matching lines to another file is not implemented; grep the per-worker logs "
         "of --log-dir with --tee 3 instead");
  refuse(app, "--print-completion,--print_completion",
         "shell completion scripts are not generated; --help lists every flag");
}

void apply_invocation_flags(const InvocationFlags& f, comm::LaunchConfig& c) {
  using comm::Invocation;
  if (f.module && f.no_python)
    RG_THROW(InvalidArgument,
             "-m/--module runs a Python module and --no-python runs no Python: give one of them");
  if (f.run_path && (f.module || f.no_python))
    RG_THROW(InvalidArgument, "--run-path runs a script file with Python: drop ",
             f.module ? "-m/--module" : "--no-python");
  c.invocation = f.module      ? Invocation::module
                 : f.no_python ? Invocation::executable
                 : f.run_path  ? Invocation::run_path
                               : Invocation::automatic;
  c.convention = f.convention == "launch"       ? comm::LaunchConvention::launch
                 : f.convention == "launch-1.x" ? comm::LaunchConvention::launch_1x
                                                : comm::LaunchConvention::torchrun;
  // torchrun's fallback for the prefix template.
  if (const char* t = std::getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
      t && c.log_line_prefix_template.empty())
    c.log_line_prefix_template = t;
}

std::vector<std::string> torchrun_flags_for_remote(const CLI::App& app) {
  std::vector<std::string> words;
  for (const char* flag : kRemoteFlags)
    if (app.get_option(flag)->count()) words.push_back(flag);
  for (const char* option : kRemoteOptions)
    for (const auto& value : app.get_option(option)->results())
      words.insert(words.end(), {option, value});
  return words;
}

}  // namespace ringgrad::cli
