// Tests of comm/launcher/worker_command: how PROGRAM runs (torchrun's python -u, -m, --run-path,
// --no-python and ringgrad-run's automatic choice), the legacy --local-rank argument, and the
// errors that name a program which cannot run. Files live in a temporary folder that is also
// the working directory and the only entry of PATH.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "comm/launcher/worker_command.h"
#include "core/error.h"
#include "tests/message_of.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using ringgrad::testing::message_of;

namespace {

// A temporary folder with bin/ (a fake python3 and a tool) and the working directory inside;
// the test chdirs there and back.
struct Sandbox {
  std::string root, bin, old_cwd;
  Sandbox() {
    char templ[] = "/tmp/worker_command_XXXXXX";
    root = ::mkdtemp(templ);
    bin = root + "/bin";
    std::filesystem::create_directories(bin);
    char cwd[PATH_MAX];
    old_cwd = ::getcwd(cwd, sizeof cwd);
    REQUIRE(::chdir(root.c_str()) == 0);
    file(bin + "/python3", true);
    file(bin + "/tool", true);
  }
  ~Sandbox() {
    (void)!::chdir(old_cwd.c_str());
    std::filesystem::remove_all(root);
  }
  static void file(const std::string& path, bool executable) {
    std::ofstream(path) << "#!/bin/sh\n";
    ::chmod(path.c_str(), executable ? 0755 : 0644);
  }
  WorkerCommand resolve(Invocation how, const std::vector<std::string>& argv,
                        LaunchConvention convention = LaunchConvention::torchrun,
                        bool use_env = false, const std::string& path = "") const {
    return resolve_worker_command(how, convention, use_env, argv, path.empty() ? bin : path, "");
  }
};

using Argv = std::vector<std::string>;

}  // namespace

TEST_CASE("worker command: a script runs with the Python on PATH, as torchrun runs it") {
  Sandbox s;
  Sandbox::file("train.py", false);  // neither executable nor on PATH: torchrun's common case
  Sandbox::file("tutorial", false);  // no .py, not executable: only Python can run it
  const std::string python = s.bin + "/python3";
  CHECK(s.resolve(Invocation::automatic, {"train.py", "--epochs", "2"}).argv(0) ==
        Argv{python, "-u", "train.py", "--epochs", "2"});
  CHECK(s.resolve(Invocation::automatic, {"tutorial"}).argv(1) == Argv{python, "-u", "tutorial"});
  CHECK(s.resolve(Invocation::module, {"json.tool", "x"}).argv(0) ==
        Argv{python, "-u", "-m", "json.tool", "x"});
  const Argv run_path = s.resolve(Invocation::run_path, {"train.py", "a"}).argv(0);
  REQUIRE(run_path.size() == 6);
  CHECK(Argv(run_path.begin(), run_path.begin() + 3) == Argv{python, "-u", "-c"});
  CHECK(run_path[3].find("runpy.run_path(sys.argv[0], run_name='__main__')") != std::string::npos);
  CHECK(Argv(run_path.begin() + 4, run_path.end()) == Argv{"train.py", "a"});
  // PYTHON_EXEC (torchrun's override) wins over PATH; python3 before python on PATH.
  Sandbox::file(s.root + "/my-python", true);
  CHECK(resolve_worker_command(Invocation::automatic, LaunchConvention::torchrun, false,
                               {"train.py"}, s.bin, s.root + "/my-python")
            .head[0] == s.root + "/my-python");
  CHECK(message_of<InvalidArgument>([&] {
          resolve_worker_command(Invocation::automatic, LaunchConvention::torchrun, false,
                                 {"train.py"}, s.bin, "/no/such/python");
        }).find("PYTHON_EXEC='/no/such/python'") != std::string::npos);
  // No Python at all: said so, with what to do.
  std::filesystem::create_directories(s.root + "/empty");
  CHECK(message_of<InvalidArgument>([&] {
          s.resolve(Invocation::automatic, {"train.py"}, LaunchConvention::torchrun, false,
                    s.root + "/empty");
        }).find("neither python3 nor python is on PATH") != std::string::npos);
}

TEST_CASE("worker command: executables run as they are, with --no-python or automatically") {
  Sandbox s;
  Sandbox::file("run.sh", true);
  CHECK(s.resolve(Invocation::automatic, {"tool", "-x"}).argv(0) == Argv{"tool", "-x"});
  CHECK(s.resolve(Invocation::automatic, {"./run.sh"}).argv(0) == Argv{"./run.sh"});
  CHECK(s.resolve(Invocation::executable, {"tool"}).argv(0) == Argv{"tool"});
  // A .py file runs with Python even when it is executable, as under torchrun.
  Sandbox::file("script.py", true);
  CHECK(s.resolve(Invocation::automatic, {"script.py"}).head[1] == "-u");
}

TEST_CASE("worker command: a program that cannot run is named, with the reason and the fix") {
  Sandbox s;
  Sandbox::file("train.py", false);
  Sandbox::file("mybinary", true);
  Sandbox::file("notexec", false);
  auto error = [&](Invocation how, const std::string& program) {
    return message_of<InvalidArgument>([&] { s.resolve(how, {program}); });
  };
  // The file exists: never "No such file or directory".
  CHECK(error(Invocation::executable, "train.py")
            .find("not found on PATH; the file of that name "
                  "in this directory runs as ./train.py") != std::string::npos);
  CHECK(error(Invocation::executable, "./notexec").find("not an executable file (chmod +x") !=
        std::string::npos);
  CHECK(error(Invocation::automatic, "mybinary").find("give ./mybinary") != std::string::npos);
  CHECK(error(Invocation::automatic, "missing").find("no file of that name in " + s.root) !=
        std::string::npos);
  CHECK(error(Invocation::automatic, "missing.py").find("'missing.py' with Python: no such file") !=
        std::string::npos);
  CHECK(error(Invocation::run_path, "gone.py").find("with --run-path: no such file") !=
        std::string::npos);
  CHECK(error(Invocation::executable, "./gone").find("'./gone': no such file") !=
        std::string::npos);
  CHECK(error(Invocation::executable, "nowhere").find("not found on PATH") != std::string::npos);
}

TEST_CASE("worker command: torch.distributed.launch's --local-rank argument, unless --use-env") {
  Sandbox s;
  Sandbox::file("train.py", false);
  const std::string python = s.bin + "/python3";
  const Argv args = {"train.py", "--lr", "0.1"};
  // After the script, before its own arguments, where torch.distributed.launch puts it.
  CHECK(s.resolve(Invocation::automatic, args, LaunchConvention::launch).argv(3) ==
        Argv{python, "-u", "train.py", "--local-rank=3", "--lr", "0.1"});
  CHECK(s.resolve(Invocation::automatic, args, LaunchConvention::launch_1x).argv(0) ==
        Argv{python, "-u", "train.py", "--local_rank=0", "--lr", "0.1"});
  CHECK(s.resolve(Invocation::module, {"pkg.train"}, LaunchConvention::launch).argv(1) ==
        Argv{python, "-u", "-m", "pkg.train", "--local-rank=1"});
  CHECK(
      s.resolve(Invocation::automatic, args, LaunchConvention::launch, /*use_env=*/true).argv(3) ==
      Argv{python, "-u", "train.py", "--lr", "0.1"});
  CHECK(s.resolve(Invocation::automatic, args).argv(3) ==
        Argv{python, "-u", "train.py", "--lr", "0.1"});
  // torch.distributed.launch refuses --no-python without --use-env; so do we, saying why.
  CHECK(message_of<InvalidArgument>([&] {
          s.resolve(Invocation::executable, {"tool"}, LaunchConvention::launch);
        }).find("needs --use-env") != std::string::npos);
  CHECK(s.resolve(Invocation::executable, {"tool"}, LaunchConvention::launch, true).argv(0) ==
        Argv{"tool"});
}

TEST_CASE("worker command: find_on_path takes the first executable, an empty entry is here") {
  Sandbox s;
  Sandbox::file("here", true);
  Sandbox::file(s.bin + "/plain", false);
  CHECK(find_on_path("tool", "/nonexistent:" + s.bin) == s.bin + "/tool");
  CHECK(find_on_path("plain", s.bin).empty());  // not executable
  CHECK(find_on_path("here", s.bin + ":") == "./here");
  CHECK(find_on_path("here", s.bin).empty());
}
