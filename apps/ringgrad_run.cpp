// ringgrad-run: the launcher, a drop-in for torchrun. Flag parsing only; the work is done by
// comm::run_launcher (comm/launcher/). Bad input exits 2 with one line; setup failures
// (port in use, store unreachable, rendezvous timeout) exit 1 with one line.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "comm/launcher/launch_config.h"
#include "comm/launcher/launcher.h"
#include "core/error.h"

namespace {

// Error messages carry "[file.cpp:42] " for developers; users get the sentence.
std::string user_message(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    auto close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  return m;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "ringgrad-run: error: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringgrad;
  using namespace ringgrad::comm;
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "ringgrad-run: start PROGRAM on this node as nproc-per-node workers of a "
      "distributed job (torchrun's flags and worker environment)",
      "ringgrad-run"};
  LaunchConfig c;
  std::string nnodes = "1", nproc = "1", endpoint, rdzv_conf, redirects = "0", tee = "0",
              ranks_filter;
  double monitor_interval = 0.1, stop_grace = 5;
  bool no_python = false;
  app.add_option("--nnodes", nnodes, "N or MIN:MAX nodes");
  app.add_option("--nproc-per-node,--nproc_per_node", nproc, "workers per node: N, auto, cpu, gpu");
  app.add_option("--node-rank,--node_rank", c.node_rank, "this node's rank (default: assigned)");
  app.add_option("--master-addr,--master_addr", c.master_addr, "static backend: node 0's address");
  app.add_option("--master-port,--master_port", c.master_port,
                 "static backend: store port (0: free)");
  app.add_option("--rdzv-id,--rdzv_id", c.rdzv_id, "job id shared by all nodes");
  app.add_option("--rdzv-backend,--rdzv_backend", c.rdzv_backend, "c10d or static");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", endpoint, "c10d backend: host[:port]");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "k=v,...: timeout, last_call_timeout, connect_timeout, keep_alive_timeout (s), "
                 "token, bind_addr");
  app.add_flag("--standalone", c.standalone, "one node, store on a free loopback port");
  app.add_option("--max-restarts,--max_restarts", c.max_restarts, "restarts of the whole job");
  app.add_option("--monitor-interval,--monitor_interval", monitor_interval,
                 "seconds between checks");
  app.add_option("--stop-grace,--stop_grace", stop_grace, "seconds from SIGTERM to SIGKILL");
  app.add_option("--log-dir,--log_dir", c.log_dir, "directory for per-worker logs");
  app.add_option("-r,--redirects", redirects,
                 "0-3 or local_rank:bits,... (1 out, 2 err): files only");
  app.add_option("-t,--tee", tee,
                 "0-3 or local_rank:bits,...: files and console, [node:rank] prefix");
  app.add_option("--local-ranks-filter,--local_ranks_filter", ranks_filter,
                 "local ranks shown on the console, e.g. 0,1");
  app.add_flag("--no-python,--no_python", no_python,
               "accepted for torchrun compatibility (implied)");
  app.footer("PROGRAM [ARGS...] follow the options: ringgrad-run [OPTIONS] PROGRAM [ARGS...]");
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
    if (!endpoint.empty()) {
      std::tie(c.rdzv_host, c.rdzv_port) = parse_endpoint(endpoint, c.rdzv_port);
      // As in torchrun, the static backend reads its master from the endpoint too.
      if (c.rdzv_backend == "static")
        std::tie(c.master_addr, c.master_port) = {c.rdzv_host, c.rdzv_port};
    }
    apply_rdzv_conf(c, parse_key_values(rdzv_conf, "--rdzv-conf"));
    c.redirects = parse_stream_selection(redirects, "--redirects");
    c.tee = parse_stream_selection(tee, "--tee");
    c.local_ranks_filter = parse_rank_list(ranks_filter, "--local-ranks-filter");
    c.monitor_interval = std::chrono::milliseconds(static_cast<int64_t>(monitor_interval * 1000));
    c.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(stop_grace * 1000));
    c.command = app.remaining();
    if (!c.command.empty() && c.command[0] == "--") c.command.erase(c.command.begin());
    validate(c);
  } catch (const InvalidArgument& e) {
    return fail(2, user_message(e));
  }
  try {
    return run_launcher(c);
  } catch (const std::exception& e) {
    return fail(1, user_message(e));
  }
}
