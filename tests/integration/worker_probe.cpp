// worker_probe: the test program the integration tests launch under ringgrad-run. It checks
// the torchrun environment it was given, records it, meets the other ranks in a store barrier,
// optionally all-reduces over a ring group (one rank hanging before one of them, on request),
// and then misbehaves on request (exit with a code, die by a signal, ignore SIGTERM, leave a
// stubborn grandchild or one in its own session, sleep) so the launcher's failure handling can be
// observed.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "comm/process_group/from_environment.h"
#include "comm/store/worker_store.h"
#include "core/env.h"

using namespace ringgrad;
using namespace ringgrad::comm;

namespace {

const char* kTorchrunVars[] = {"RANK",
                               "LOCAL_RANK",
                               "WORLD_SIZE",
                               "LOCAL_WORLD_SIZE",
                               "GROUP_RANK",
                               "ROLE_RANK",
                               "ROLE_WORLD_SIZE",
                               "MASTER_ADDR",
                               "MASTER_PORT",
                               "TORCHELASTIC_RESTART_COUNT",
                               "TORCHELASTIC_MAX_RESTARTS",
                               "TORCHELASTIC_RUN_ID",
                               "OMP_NUM_THREADS",
                               "GROUP_WORLD_SIZE"};

int die(const std::string& why) {
  std::fprintf(stderr, "worker_probe: %s\n", why.c_str());
  return 10;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  for (int i = 1; i + 1 < argc; i += 2) opt[argv[i]] = argv[i + 1];
  auto get = [&](const std::string& k, const std::string& d) { return opt.count(k) ? opt[k] : d; };
  auto num = [&](const std::string& k, int d) {
    return std::atoi(get(k, std::to_string(d)).c_str());
  };

  if (get("--check-fds", "0") == "1") {  // nothing but stdin/stdout/stderr was inherited
    DIR* dir = ::opendir("/proc/self/fd");
    while (dirent* e = dir ? ::readdir(dir) : nullptr) {
      const int fd = std::atoi(e->d_name);
      if (e->d_name[0] != '.' && fd > 2 && fd != ::dirfd(dir))
        return die("inherited file descriptor " + std::to_string(fd));
    }
    if (dir) ::closedir(dir);
  }
  WorkerEnv env;
  try {
    env = read_worker_env();
  } catch (const std::exception& e) {
    return die(e.what());
  }
  const bool launched = env_get("TORCHELASTIC_RUN_ID").has_value();
  if (launched) {
    for (const char* v : kTorchrunVars)
      if (!env_get(v)) return die(std::string(v) + " is missing");
    if (env_int("ROLE_RANK", -1) != env.rank || env_int("ROLE_WORLD_SIZE", -1) != env.world_size)
      return die("ROLE_RANK/ROLE_WORLD_SIZE differ from RANK/WORLD_SIZE");
  }
  const int generation = static_cast<int>(env_int("TORCHELASTIC_RESTART_COUNT", 0));
  const std::string tag = std::to_string(env.rank) + "." + std::to_string(generation);
  const std::string out = get("--out", "");
  if (!out.empty()) {
    std::ofstream f(out + "/env." + tag);
    for (const char* v : kTorchrunVars) f << v << "=" << env_str(v, "") << "\n";
    // What ringgrad-run adds for its own workers (empty when not set).
    for (const char* v :
         {"RINGGRAD_STORE_TOKEN", "TORCHELASTIC_USE_AGENT_STORE", "RINGGRAD_TIMEOUT_S"})
      f << v << "=" << env_str(v, "") << "\n";
    std::ofstream(out + "/pid." + tag) << ::getpid() << "\n";
  }
  if (get("--barrier", "0") == "1") {
    try {
      auto ws = create_worker_store(env, Milliseconds(num("--timeout", 30) * 1000));
      store_barrier(*ws.store, "probe", env.rank, env.world_size, Milliseconds(30'000));
      if (env.rank == 0) ws.store->set("probe/done", "1");
      ws.store->get("probe/done");
      ws.finish(Milliseconds(30'000));
    } catch (const std::exception& e) {
      return die(e.what());
    }
  }
  // N all-reduces 100 ms apart over a ring group (the store of rank 0 alive meanwhile);
  // "joined.<tag>" says the group is formed. A rank stopped in between leaves the others
  // waiting until RINGGRAD_TIMEOUT_S.
  if (const int n = num("--allreduces", 0); n > 0) {
    try {
      auto job = join_distributed_job(Backend::ring, "probe");
      if (!out.empty()) std::ofstream(out + "/joined." + tag) << "1\n";
      Tensor t = Tensor::full({1024}, 1.0);
      for (int i = 0; i < n && job.group; ++i) {
        // --hang-rank R --hang-before K --hang-s S: rank R is busy in its own code for S seconds
        // before its K-th all-reduce (the others wait in theirs).
        if (num("--hang-rank", -1) == env.rank && num("--hang-before", -1) == i)
          std::this_thread::sleep_for(std::chrono::seconds(num("--hang-s", 0)));
        job.group->allreduce(t)->wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      job.finish();
    } catch (const std::exception& e) {
      return die(e.what());
    }
  }
  std::printf("probe rank %d of %d ready\n", env.rank, env.world_size);
  std::fflush(stdout);
  std::fprintf(stderr, "probe rank %d stderr line\n", env.rank);

  const bool this_generation = num("--fail-generation", generation) == generation;
  if (get("--ignore-term", "0") == "1") ::signal(SIGTERM, SIG_IGN);
  if (get("--stubborn-child", "0") == "1") {
    const pid_t child = ::fork();
    if (child == 0) {
      ::signal(SIGTERM, SIG_IGN);
      for (;;) ::pause();
    }
    if (!out.empty()) std::ofstream(out + "/child." + tag) << child << "\n";
  }
  if (get("--setsid-child", "0") == "1") {  // a child that leaves the worker's process group
    const pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      for (;;) ::pause();
    }
    if (!out.empty()) std::ofstream(out + "/setsid." + tag) << child << "\n";
  }
  if (this_generation && num("--fail-rank", -1) == env.rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(num("--fail-after-ms", 0)));
    const int sig = num("--signal", 0);
    std::fprintf(stderr, "probe rank %d failing on purpose\n", env.rank);
    if (sig) {
      // The default action, so the probe dies by the signal also where a sanitizer installed a
      // handler (ASan's turns SIGSEGV into a report and exit 1).
      ::signal(sig, SIG_DFL);
      ::kill(::getpid(), sig);
    }
    return num("--exit-code", 3);
  }
  if (this_generation) std::this_thread::sleep_for(std::chrono::seconds(num("--sleep", 0)));
  return 0;
}
