// ringgrad-run: the launcher, a drop-in for torchrun. Flag parsing only; the work is done by
// comm::run_launcher (comm/launcher/), or with --hostfile by comm::run_ssh_launch, which
// starts this same program on every host over SSH. Bad input exits 2 with one line; setup
// failures (port in use, store unreachable, rendezvous timeout) exit 1 with one line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "apps/cli_checks.h"
#include "apps/torchrun_flags.h"
#include "comm/launcher/check/env_check.h"
#include "comm/launcher/check/node_check.h"
#include "comm/launcher/launch_config.h"
#include "comm/launcher/launcher.h"
#include "comm/launcher/ssh/ssh_launch.h"
#include "core/error.h"

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "ringgrad-run: error: %s\n", message.c_str());
  return code;
}

std::vector<std::string> split_words(const std::string& text, char sep) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; sep == ' ' ? bool(in >> w) : bool(std::getline(in, w, sep));)
    if (!w.empty()) words.push_back(w);
  return words;
}

std::string self_path() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "ringgrad-run";
}

// --hostfile: the hostfile decides the node flags; the flags every node shares go on to each
// remote ringgrad-run as they were given.
struct SshFlags {
  std::string hostfile, ssh_opts, exports, remote_run;
  int ssh_port = 0;
};

// --check: the environment check instead of a program; --check-node is what it starts.
struct CheckFlags {
  bool check = false;
  std::string node_report;
  int port = 0;
};

ringgrad::comm::SshLaunchConfig ssh_launch_config(const CLI::App& app, const SshFlags& f,
                                                  const ringgrad::comm::LaunchConfig& c) {
  using ringgrad::InvalidArgument;
  for (const char* owned : {"--nnodes", "--node-rank", "--nproc-per-node", "--master-addr",
                            "--rdzv-backend", "--rdzv-endpoint", "--standalone"})
    if (app.get_option(owned)->count())
      RG_THROW(InvalidArgument, owned, " cannot be combined with --hostfile (the hostfile '",
               f.hostfile, "' gives the nodes, their order and slots)");
  ringgrad::comm::SshLaunchConfig s;
  s.hosts = ringgrad::comm::read_hostfile(f.hostfile);
  s.ssh_port = f.ssh_port;
  s.ssh_opts = split_words(f.ssh_opts, ' ');
  s.export_vars = split_words(f.exports, ',');
  s.master_port = c.master_port;
  s.command = c.command;
  s.stop_grace = c.stop_grace;
  s.remote_binary = f.remote_run.empty() ? self_path() : f.remote_run;
  char cwd[PATH_MAX] = {};
  s.remote_workdir = ::getcwd(cwd, sizeof cwd) ? cwd : ".";
  for (const char* shared : {"--rdzv-id", "--rdzv-conf", "--max-restarts", "--monitor-interval",
                             "--stop-grace", "--stopped-timeout", "--log-dir", "--redirects",
                             "--tee", "--local-ranks-filter", "--check-port", "--timeout"})
    for (const auto& value : app.get_option(shared)->results())
      s.launcher_flags.insert(s.launcher_flags.end(), {shared, value});
  const auto invocation = ringgrad::cli::torchrun_flags_for_remote(app);
  s.launcher_flags.insert(s.launcher_flags.end(), invocation.begin(), invocation.end());
  if (app.get_option("--check")->count()) {  // every host runs the check; no program
    s.launcher_flags.push_back("--check");
    s.command.clear();
  }
  return s;
}

std::string sibling_path(const std::string& self, const std::string& name) {
  const auto slash = self.rfind('/');
  return slash == std::string::npos ? name : self.substr(0, slash + 1) + name;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringgrad;
  using namespace ringgrad::comm;
  namespace cli = ringgrad::cli;
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "ringgrad-run: start PROGRAM on this node as nproc-per-node workers of a "
      "distributed job (torchrun's flags and worker environment)",
      "ringgrad-run"};
  LaunchConfig c;
  std::string nnodes = "1", nproc = "1", endpoint, rdzv_conf, redirects = "0", tee = "0",
              ranks_filter;
  double monitor_interval = 0.1, stop_grace = 5, stopped_timeout = 10, timeout_s = 0;
  cli::InvocationFlags invocation;
  SshFlags ssh;
  CheckFlags check;
  // Each of torchrun's own flags also takes its value from torchrun's PET_<NAME> variable.
  app.add_option("--nnodes", nnodes, "N or MIN:MAX nodes")->envname("PET_NNODES");
  app.add_option("--nproc-per-node,--nproc_per_node", nproc, "workers per node: N, auto, cpu, gpu")
      ->envname("PET_NPROC_PER_NODE");
  app.add_option("--node-rank,--node_rank", c.node_rank, "this node's rank (default: assigned)")
      ->check(cli::whole_number_in(0, kMaxNodes - 1))
      ->envname("PET_NODE_RANK");
  app.add_option("--master-addr,--master_addr", c.master_addr, "static backend: node 0's address")
      ->envname("PET_MASTER_ADDR");
  app.add_option("--master-port,--master_port", c.master_port,
                 "static backend: store port (0: free)")
      ->check(cli::whole_number_in(0, 65535))
      ->envname("PET_MASTER_PORT");
  app.add_option("--rdzv-id,--rdzv_id", c.rdzv_id, "job id shared by all nodes")
      ->envname("PET_RDZV_ID");
  app.add_option("--rdzv-backend,--rdzv_backend", c.rdzv_backend, "c10d or static")
      ->envname("PET_RDZV_BACKEND");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", endpoint, "c10d backend: host[:port]")
      ->envname("PET_RDZV_ENDPOINT");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "k=v,...: timeout, last_call_timeout, connect_timeout, keep_alive_timeout (s), "
                 "token, bind_addr")
      ->envname("PET_RDZV_CONF");
  app.add_flag("--standalone", c.standalone, "one node, store on a free loopback port")
      ->envname("PET_STANDALONE");
  app.add_option("--max-restarts,--max_restarts", c.max_restarts, "restarts of the whole job")
      ->check(cli::whole_number_in(0, 10000))
      ->envname("PET_MAX_RESTARTS");
  app.add_option("--monitor-interval,--monitor_interval", monitor_interval,
                 "seconds between checks")
      ->check(cli::number_in(0.001, 3600))
      ->envname("PET_MONITOR_INTERVAL");
  app.add_option(
         "--stop-grace,--stop_grace,--shutdown-timeout,--shutdown_timeout", stop_grace,
         "seconds from SIGTERM to SIGKILL (torchrun's --shutdown-timeout, default 30 there)")
      ->check(cli::number_in(0, 3600))
      ->envname("PET_SHUTDOWN_TIMEOUT");
  app.add_option("--stopped-timeout", stopped_timeout,
                 "seconds a worker may stay stopped (SIGSTOP, SIGTSTP) before the job fails "
                 "naming it (a debugger's stop does not count)")
      ->check(cli::number_in(0.001, 1e7));
  app.add_option("--timeout", timeout_s,
                 "seconds any collective of a worker may wait for the others before the job "
                 "fails naming the missing rank; sets RINGGRAD_TIMEOUT_S for every worker "
                 "(default: RINGGRAD_TIMEOUT_S, else 600; torchrun has no such flag)")
      ->check(cli::number_in(0, 1e7));
  app.add_option("--log-dir,--log_dir", c.log_dir, "directory for per-worker logs")
      ->envname("PET_LOG_DIR");
  app.add_option("-r,--redirects", redirects,
                 "0-3 or local_rank:bits,... (1 out, 2 err): files only")
      ->envname("PET_REDIRECTS");
  app.add_option("-t,--tee", tee,
                 "0-3 or local_rank:bits,...: files and console, [node:rank] prefix")
      ->envname("PET_TEE");
  app.add_option("--local-ranks-filter,--local_ranks_filter", ranks_filter,
                 "local ranks shown on the console, e.g. 0,1")
      ->envname("PET_LOCAL_RANKS_FILTER");
  cli::add_torchrun_flags(app, c, invocation);
  app.add_option("--hostfile", ssh.hostfile,
                 "'host slots=N' lines: start one ringgrad-run per host over SSH");
  app.add_option("--ssh-port", ssh.ssh_port, "--hostfile: the hosts' SSH port")
      ->check(cli::whole_number_in(1, 65535));
  app.add_option("--ssh-opts", ssh.ssh_opts, "--hostfile: extra ssh arguments, space-separated");
  app.add_option("--export", ssh.exports, "--hostfile: VAR,... carried to every host");
  app.add_option("--remote-run", ssh.remote_run,
                 "--hostfile: ringgrad-run's path on the hosts (default: this one's)");
  app.add_option("--console-label", c.console_label,
                 "prefix every worker line with [LABEL:rank]: (set by --hostfile)");
  app.add_flag("--stop-on-stdin-eof", c.stop_on_stdin_eof,
               "stop the job when stdin closes (set by --hostfile)");
  app.add_flag("--check", check.check,
               "check the nodes instead of running PROGRAM: rendezvous, worker ports, build, "
               "CPUs, CUDA, then a short all_reduce_perf; a PASS/FAIL table, exit 0 if all pass");
  app.add_option("--check-port", check.port,
                 "--check: node k probes worker port P+k instead of a free one")
      ->check(cli::whole_number_in(1, 65535));
  app.add_option("--check-node", check.node_report, "(internal) one node's checker for --check")
      ->group("");
  app.footer(
      "PROGRAM [ARGS...] follow the options: ringgrad-run [OPTIONS] PROGRAM [ARGS...]. As with "
      "torchrun, a script runs with the Python on PATH (python -u script.py); an executable "
      "file or a program on PATH runs directly.");
  app.prefix_command();  // everything from PROGRAM on belongs to the program
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(2, e.what());
  }
  try {
    std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(nnodes);
    c.nproc_per_node = parse_nproc_per_node(nproc);
    cli::apply_invocation_flags(invocation, c);
    if (!endpoint.empty()) {
      std::tie(c.rdzv_host, c.rdzv_port) = parse_endpoint(endpoint, c.rdzv_port);
      // As in torchrun, the static backend reads its master from the endpoint too.
      if (c.rdzv_backend == "static")
        std::tie(c.master_addr, c.master_port) = {c.rdzv_host, c.rdzv_port};
    }
    const auto conf = parse_key_values(rdzv_conf, "--rdzv-conf");
    apply_rdzv_conf(c, conf);
    // RINGGRAD_STORE_TOKEN=$SECRET with SECRET unset must not quietly turn authentication off.
    if (const char* t = std::getenv("RINGGRAD_STORE_TOKEN"); t && !*t && c.token.empty())
      RG_THROW(InvalidArgument,
               "RINGGRAD_STORE_TOKEN is set but empty (an unset variable?); give the job's token, "
               "or unset it to run without one");
    if (check.check && !conf.count("timeout")) c.rdzv_timeout = kCheckRendezvousTimeout;
    c.redirects = parse_stream_selection(redirects, "--redirects");
    c.tee = parse_stream_selection(tee, "--tee");
    c.local_ranks_filter = parse_rank_list(ranks_filter, "--local-ranks-filter");
    c.monitor_interval = std::chrono::milliseconds(static_cast<int64_t>(monitor_interval * 1000));
    c.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(stop_grace * 1000));
    c.stopped_timeout = std::chrono::milliseconds(static_cast<int64_t>(stopped_timeout * 1000));
    if (!check.node_report.empty()) {
      NodeCheckOptions o;
      o.report_path = check.node_report;
      o.port_base = check.port;
      return run_node_check(o);
    }
    c.command = app.remaining();
    if (!c.command.empty() && c.command[0] == "--") c.command.erase(c.command.begin());
    if (check.port != 0 && !check.check)
      RG_THROW(InvalidArgument, "--check-port only applies with --check");
    if (check.check) {
      if (!c.command.empty())
        RG_THROW(InvalidArgument, "--check runs no PROGRAM; drop '", c.command[0], "'");
      c.command = {"check"};  // a stand-in: validate() wants a program
    }
    if (!ssh.hostfile.empty()) {
      LaunchConfig shared = c;  // the node flags are the hostfile's; check the rest here
      shared.min_nodes = shared.max_nodes = 2;
      shared.node_rank = 0;
      validate(shared);
      return run_ssh_launch(ssh_launch_config(app, ssh, c));
    }
    for (const char* ssh_only : {"--ssh-port", "--ssh-opts", "--export", "--remote-run"})
      if (app.get_option(ssh_only)->count())
        RG_THROW(InvalidArgument, ssh_only, " only applies with --hostfile");
    if (check.check) {
      validate(c);
      c.command.clear();
      EnvCheckOptions o;
      o.self = self_path();
      o.perf = sibling_path(o.self, "all_reduce_perf");
      o.worker_port = check.port;
      return run_env_check(c, o);
    }
    validate(c);
    if (!c.log_dir.empty()) c.log_run_folder = make_log_run_folder(c.log_dir, c.rdzv_id);
    if (timeout_s > 0) ::setenv("RINGGRAD_TIMEOUT_S", std::to_string(timeout_s).c_str(), 1);
  } catch (const InvalidArgument& e) {
    return fail(2, ringgrad::user_message(e));
  } catch (const std::exception& e) {
    return fail(1, ringgrad::user_message(e));
  }
  try {
    return run_launcher(c);
  } catch (const InvalidArgument& e) {  // a setting found unusable once the store was reached
    return fail(2, ringgrad::user_message(e));
  } catch (const std::exception& e) {
    return fail(1, ringgrad::user_message(e));
  }
}
