// ringgrad-run started the way torchrun is: a script that is neither executable nor on PATH
// runs with the Python on PATH (python -u), -m runs a module, --run-path goes through runpy,
// torch.distributed.launch's --local-rank argument unless --use-env, torchrun's worker
// variables, the error file's exception in the failure summary, and the torchrun flags that
// change what workers see. The workers are py_probe.py (Python's standard library only).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/launcher/worker_command.h"
#include "tests/integration/launch_harness.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;
using Argv = std::vector<std::string>;

namespace {

const std::string kProbeDir = PY_PROBE_DIR;

// A job folder with a copy of py_probe.py (not executable) and bin/python3, a wrapper that
// records its arguments and runs the real python3: it is the first Python on PATH.
struct PyJob {
  TempDir dir;
  std::string real_python = comm::find_on_path("python3", std::getenv("PATH"));
  std::map<std::string, std::string> env;

  PyJob() {
    std::filesystem::copy_file(kProbeDir + "/py_probe.py", dir.path() + "/py_probe.py");
    std::filesystem::create_directories(dir.path() + "/bin");
    const std::string wrapper = dir.path() + "/bin/python3";
    std::ofstream(wrapper)
        << "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$PROBE_OUT/python_args.$RANK\"\n"
        << "exec " << real_python << " \"$@\"\n";
    ::chmod(wrapper.c_str(), 0755);
    env = {{"PATH", dir.path() + "/bin:" + std::getenv("PATH")}, {"PROBE_OUT", dir.path()}};
  }
  bool usable() const { return !real_python.empty(); }
  // ringgrad-run ARGS in the job folder (the script is named relative to it).
  RunResult run(const Argv& args, seconds deadline = seconds(60)) {
    Argv cmd = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir.path()};
    const Argv l = launcher(args);
    cmd.insert(cmd.end(), l.begin(), l.end());
    return testing::run(cmd, deadline, env);
  }
  nlohmann::json record(int rank) const {
    std::ifstream in(dir.path() + "/run." + std::to_string(rank) + ".json");
    REQUIRE_MESSAGE(in, "rank ", rank, " left no record");
    return nlohmann::json::parse(in);
  }
  Argv python_args(int rank) const {
    std::ifstream in(dir.path() + "/python_args." + std::to_string(rank));
    Argv lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

const char* kNoPython = "no python3 on PATH to run the Python workers";

}  // namespace

TEST_CASE("invocation: a script that is not executable runs as python -u script.py") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  auto r = job.run({"--standalone", "--nproc-per-node", "2", "py_probe.py", "--lr", "0.1"});
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(job.python_args(rank) == Argv{"-u", "py_probe.py", "--lr", "0.1"});  // PATH's Python
    const auto rec = job.record(rank);
    CHECK(rec["argv"] == Argv{"py_probe.py", "--lr", "0.1"});
    CHECK(rec["name"] == "__main__");
  }
}

TEST_CASE("invocation: -m runs a module, --run-path a file through runpy, --no-python as is") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  SUBCASE("-m") {
    job.env["PYTHONPATH"] = job.dir.path();
    auto r = job.run({"--standalone", "--nproc-per-node", "2", "-m", "py_probe", "x"});
    REQUIRE_MESSAGE(r.status.ok(), r.err);
    CHECK(job.python_args(1) == Argv{"-u", "-m", "py_probe", "x"});
    CHECK(job.record(1)["argv"][1] == "x");
    CHECK(job.record(1)["name"] == "__main__");
  }
  SUBCASE("--run-path") {
    auto r = job.run({"--standalone", "--run-path", "py_probe.py", "y"});
    REQUIRE_MESSAGE(r.status.ok(), r.err);
    CHECK(job.record(0)["argv"] == Argv{"py_probe.py", "y"});
    CHECK(job.record(0)["name"] == "__main__");
  }
  SUBCASE("--no-python: a script made executable with its own #! line") {
    const std::string script = job.dir.path() + "/exec_probe";
    std::ofstream(script) << "#!" << job.real_python << "\n"
                          << std::ifstream(kProbeDir + "/py_probe.py").rdbuf();
    ::chmod(script.c_str(), 0755);
    auto r = job.run({"--standalone", "--no-python", "./exec_probe", "z"});
    REQUIRE_MESSAGE(r.status.ok(), r.err);
    CHECK(job.python_args(0).empty());  // PATH's python3 was not involved
    CHECK(job.record(0)["argv"][1] == "z");
  }
}

TEST_CASE("invocation: torch.distributed.launch's --local-rank=N, not with --use-env") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  auto argv_of = [&](const Argv& flags, int rank) {
    Argv args = {"--standalone", "--nproc-per-node", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"py_probe.py", "--lr", "0.1"});
    auto r = job.run(args);
    REQUIRE_MESSAGE(r.status.ok(), r.err);
    return job.record(rank)["argv"].get<Argv>();
  };
  CHECK(argv_of({"--launch-convention", "launch"}, 1) ==
        Argv{"py_probe.py", "--local-rank=1", "--lr", "0.1"});
  CHECK(argv_of({"--launch-convention", "launch-1.x"}, 0) ==
        Argv{"py_probe.py", "--local_rank=0", "--lr", "0.1"});
  CHECK(argv_of({"--launch-convention", "launch", "--use_env"}, 1) ==
        Argv{"py_probe.py", "--lr", "0.1"});
  CHECK(argv_of({}, 1) == Argv{"py_probe.py", "--lr", "0.1"});  // torchrun's: LOCAL_RANK only
}

TEST_CASE("invocation: the failed rank's exception and traceback from its error file") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  job.env["PROBE_FAIL_RANK"] = "1";
  job.env["PROBE_SLEEP"] = "60";
  auto r = job.run({"--standalone", "--nproc-per-node", "2", "--stop-grace", "2", "py_probe.py"});
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status.code == 1);
  CAPTURE(r.err);
  CHECK(r.err.find("first failure: rank 1 (local rank 1") != std::string::npos);
  CHECK(r.err.find("its error file says: ValueError: bad batch on rank 1") != std::string::npos);
  CHECK(r.err.find("traceback of rank 1:\n    | Traceback (most recent call last):") !=
        std::string::npos);
  CHECK(r.err.find("    |   File \"" + job.dir.path() + "/py_probe.py\"") != std::string::npos);
  CHECK(r.err.find("in fail_here") != std::string::npos);
  // The error file sat in a temporary folder that is gone with the launcher.
  const std::string error_file = job.record(1)["env"]["TORCHELASTIC_ERROR_FILE"];
  CHECK(error_file.find("/attempt_0/1/error.json") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(
      std::filesystem::path(error_file).parent_path().parent_path().parent_path()));
}

TEST_CASE("invocation: torchrun's worker variables and the flags that set them") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  job.env["CUDA_VISIBLE_DEVICES"] = "5,7";
  job.env["PET_NPROC_PER_NODE"] = "2";  // torchrun's environment form of --nproc-per-node
  TempDir logs;
  auto r =
      job.run({"--standalone", "--role", "trainer", "--virtual-local-rank", "--local-addr",
               "localhost", "--log-dir", logs.path(), "--tee", "1", "--log-line-prefix-template",
               "<${role_name}:${rank}/${local_rank}> ", "py_probe.py"});
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  for (int rank = 0; rank < 2; ++rank) {
    const auto env = job.record(rank)["env"];
    CHECK(env["ROLE_NAME"] == "trainer");
    CHECK(env["LOCAL_RANK"] == "0");
    CHECK(env["CUDA_VISIBLE_DEVICES"] == (rank == 0 ? "5" : "7"));
    CHECK(env["MASTER_ADDR"] == "localhost");
    CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    // With --log-dir the error file is kept beside the logs.
    CHECK(env["TORCHELASTIC_ERROR_FILE"].get<std::string>().rfind(logs.path(), 0) == 0);
    CHECK(r.out.find("<trainer:" + std::to_string(rank) + "/" + std::to_string(rank) +
                     "> py_probe rank " + std::to_string(rank) + " here") != std::string::npos);
  }
  // A value the user set is theirs.
  job.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0";
  r = job.run({"--standalone", "--signals-to-handle", "SIGUSR1", "py_probe.py"});
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  CHECK(job.record(0)["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0");
  CHECK(job.record(0)["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGUSR1");
  // Too few GPUs listed for --virtual-local-rank: said before anything starts.
  job.env["CUDA_VISIBLE_DEVICES"] = "3";
  r = job.run({"--standalone", "--nproc-per-node", "2", "--virtual-local-rank", "py_probe.py"});
  CHECK(r.status.code == 2);
  CHECK(r.err.find("local rank 1 has no GPU in CUDA_VISIBLE_DEVICES=3") != std::string::npos);
}

TEST_CASE("invocation: --signals-to-handle decides which signals stop the job") {
  PyJob job;
  if (!job.usable()) return skip_test(kNoPython);
  job.env["PROBE_SLEEP"] = "60";
  for (const auto& [flags, sig] : std::vector<std::pair<Argv, int>>{
           {{}, SIGQUIT}, {{"--signals-to-handle", "SIGUSR1,SIGTERM"}, SIGUSR1}}) {
    CAPTURE(sig);
    Argv args = {"--standalone", "--stop-grace", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("py_probe.py");
    Argv cmd = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", job.dir.path()};
    const Argv l = launcher(args);
    cmd.insert(cmd.end(), l.begin(), l.end());
    std::filesystem::remove(job.dir.path() + "/run.0.json");
    Child launcher_process(cmd, job.env);
    for (int i = 0; i < 200 && !std::filesystem::exists(job.dir.path() + "/run.0.json"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    launcher_process.signal(sig);
    auto r = launcher_process.wait(seconds(30));
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.status.code == 128 + sig);  // forwarded, the job stopped, the launcher's exit says so
    CHECK(r.err.find("received " + comm::signal_name(sig)) != std::string::npos);
  }
}

TEST_CASE("invocation: contradictions and torchrun flags we cannot honour are one line, exit 2") {
  const std::vector<std::pair<Argv, std::string>> cases = {
      {{"-m", "--no-python", "x"}, "give one of them"},
      {{"--run-path", "-m", "x"}, "--run-path runs a script file with Python: drop -m/--module"},
      {{"--launch-convention", "launch", "--no-python", "true"}, "needs --use-env"},
      {{"--launch-convention", "mpi", "true"}, "--launch-convention"},
      {{"--start-method", "thread", "true"}, "--start-method"},
      {{"--signals-to-handle", "SIGKILL", "true"}, "SIGKILL cannot be caught"},
      {{"--local-addr", "a b", "true"}, "--local-addr"},
      {{"--logs-specs", "mine", "true"},
       "--logs-specs: ringgrad-run refuses it: it names a Python"},
      {{"--numa-binding", "node", "true"}, "--numa-binding: ringgrad-run refuses it"},
      {{"--event-log-handler", "console", "true"}, "--event-log-handler"},
      {{"--standalone", "no_such_script.py"}, "cannot run 'no_such_script.py' with Python"},
  };
  for (const auto& [args, says] : cases) {
    CAPTURE(args[0]);
    auto r = run(launcher(args), seconds(10));
    CHECK(r.status.code == 2);
    CHECK(lines_with(r.err, "ringgrad-run: error:").size() == 1);
    CHECK_MESSAGE(r.err.find(says) != std::string::npos, r.err);
  }
  // Accepted: torchrun's defaults, which change nothing here.
  auto ok = run(launcher({"--standalone", "--start_method", "fork", "--event-log-handler", "null",
                          "--shutdown-timeout", "3", "--no_python", "true"}),
                seconds(30));
  CHECK_MESSAGE(ok.status.ok(), ok.err);
}
