// WorkerCommand: deciding how PROGRAM runs, and the errors when it cannot.
#include "comm/launcher/worker_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "core/error.h"

namespace ringgrad::comm {

namespace {

// --run-path: torchrun calls runpy.run_path(script, run_name="__main__") with sys.argv set to
// the script and its arguments; `python -c` gets the same, the -c dropped from sys.argv.
constexpr const char* kRunPathCode =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string working_dir() {
  char cwd[PATH_MAX] = {};
  return ::getcwd(cwd, sizeof cwd) ? cwd : ".";
}

std::string find_python(const std::string& path, const std::string& python_exec,
                        const std::string& program) {
  if (!python_exec.empty()) {
    const std::string found = python_exec.find('/') == std::string::npos
                                  ? find_on_path(python_exec, path)
                                  : (is_executable_file(python_exec) ? python_exec : "");
    if (found.empty())
      RG_THROW(InvalidArgument, "PYTHON_EXEC='", python_exec,
               "' is not an executable file or a program on PATH; fix it or unset it to use the "
               "Python on PATH");
    return found;
  }
  for (const char* name : {"python3", "python"})
    if (std::string found = find_on_path(name, path); !found.empty()) return found;
  RG_THROW(InvalidArgument, "no Python to run '", program,
           "' with: neither python3 nor python is on PATH (activate the environment that has "
           "your packages, set PYTHON_EXEC, or give --no-python for an executable)");
}

// What a file a Python interpreter is to open must be: there (a file, or a directory with a
// __main__.py). Python looks nowhere else, so the error can say where it looked.
void check_script(const std::string& program, const char* how) {
  if (!exists(program))
    RG_THROW(InvalidArgument, "cannot run '", program, "' ", how, ": no such file",
             program[0] == '/' ? "" : str_cat(" in ", working_dir()));
}

void check_executable(const std::string& program, const std::string& path) {
  const char* with_python = "leave out --no-python to run it with Python";
  if (program.find('/') != std::string::npos) {
    if (!exists(program)) RG_THROW(InvalidArgument, "cannot run '", program, "': no such file");
    if (!is_executable_file(program))
      RG_THROW(InvalidArgument, "cannot run '", program,
               "': it is not an executable file (chmod +x ", program, ", or ", with_python, ")");
    return;
  }
  if (!find_on_path(program, path).empty()) return;
  if (exists(program))
    RG_THROW(InvalidArgument, "cannot run '", program,
             "': not found on PATH; the file of that name in this directory runs as ./", program,
             ", or ", with_python);
  RG_THROW(InvalidArgument, "cannot run '", program, "': not found on PATH");
}

// torchrun runs every PROGRAM with Python unless --no-python; here a program only Python can
// run goes to Python, and one the system can execute is executed.
Invocation automatic_invocation(const std::string& program, const std::string& path) {
  if (ends_with(program, ".py")) return Invocation::python;
  if (program.find('/') != std::string::npos) {
    if (!exists(program)) RG_THROW(InvalidArgument, "cannot run '", program, "': no such file");
    return is_executable_file(program) ? Invocation::executable : Invocation::python;
  }
  if (!find_on_path(program, path).empty()) return Invocation::executable;
  if (is_executable_file(program))
    RG_THROW(InvalidArgument, "cannot run '", program,
             "': not found on PATH; to run the executable file of that name in this directory, "
             "give ./",
             program);
  if (exists(program)) return Invocation::python;
  RG_THROW(InvalidArgument, "cannot run '", program, "': no file of that name in ", working_dir(),
           " and no program of that name on PATH");
}

}  // namespace

std::string find_on_path(const std::string& name, const std::string& path) {
  for (size_t start = 0;;) {
    const size_t colon = path.find(':', start);
    const std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;  // "": the working dir
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) return "";
    start = colon + 1;
  }
}

std::vector<std::string> WorkerCommand::argv(int local_rank) const {
  std::vector<std::string> out = head;
  if (!local_rank_flag.empty()) out.push_back(str_cat(local_rank_flag, "=", local_rank));
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

WorkerCommand resolve_worker_command(Invocation invocation, LaunchConvention convention,
                                     bool use_env, const std::vector<std::string>& program_and_args,
                                     const std::string& path, const std::string& python_exec) {
  RG_CHECK(!program_and_args.empty(), "resolve_worker_command: no program");
  const std::string& program = program_and_args[0];
  WorkerCommand c;
  c.tail.assign(program_and_args.begin() + 1, program_and_args.end());
  if (invocation == Invocation::automatic) invocation = automatic_invocation(program, path);
  switch (invocation) {
    case Invocation::python:
      check_script(program, "with Python");
      c.head = {find_python(path, python_exec, program), "-u", program};
      break;
    case Invocation::module:
      c.head = {find_python(path, python_exec, program), "-u", "-m", program};
      break;
    case Invocation::run_path:
      check_script(program, "with --run-path");
      c.head = {find_python(path, python_exec, program), "-u", "-c", kRunPathCode, program};
      break;
    case Invocation::executable:
    case Invocation::automatic:
      check_executable(program, path);
      c.head = {program};
      break;
  }
  if (convention != LaunchConvention::torchrun && !use_env) {
    if (invocation == Invocation::executable)
      RG_THROW(InvalidArgument, "--no-python with --launch-convention ",
               convention == LaunchConvention::launch ? "launch" : "launch-1.x",
               " needs --use-env (torch.distributed.launch's rule: an executable gets its local "
               "rank from LOCAL_RANK, not from a --local-rank argument)");
    c.local_rank_flag = convention == LaunchConvention::launch ? "--local-rank" : "--local_rank";
  }
  return c;
}

}  // namespace ringgrad::comm
