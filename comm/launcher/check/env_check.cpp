// `ringgrad-run --check` (see env_check.h): the two jobs and the table.
#include "comm/launcher/check/env_check.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/launcher/check/check_table.h"
#include "comm/launcher/launcher.h"
#include "core/cuda_memory.h"
#include "core/error.h"
#include "core/unique_fd.h"
#include "ringgrad/config.h"

namespace ringgrad::comm {

namespace {

// A file name in TMPDIR (or /tmp), removed when the check ends.
class ScratchFile {
 public:
  explicit ScratchFile(const char* stem) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = str_cat(dir && *dir ? dir : "/tmp", "/ringgrad-", stem, "-XXXXXX");
    const UniqueFd fd(::mkstemp(pattern.data()));
    RG_CHECK(fd.valid(), "cannot create a temporary file like ", pattern);
    path_ = pattern;
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  std::string read() const {
    std::ifstream in(path_);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

std::string node_label(const LaunchConfig& c) {
  return c.node_rank >= 0 ? std::to_string(c.node_rank) : std::string("this node");
}

// The user's launch with another command; store_port (when not 0) moves its store, so the
// benchmark job never meets the checkers' store while that one closes.
LaunchConfig job_like(const LaunchConfig& c, std::vector<std::string> command, int store_port) {
  LaunchConfig j = c;
  j.command = std::move(command);
  j.invocation = Invocation::executable;  // our own binaries, whatever -m/--run-path said
  j.convention = LaunchConvention::torchrun;
  j.max_restarts = 0;  // a check that needs a restart has failed
  if (store_port != 0 && j.rdzv_backend == "static" && j.master_port != 0)
    j.master_port = store_port;
  if (store_port != 0 && j.rdzv_backend == "c10d") j.rdzv_port = store_port;
  return j;
}

// Runs a launcher; a setup failure (rendezvous timeout, port in use) becomes `error`, the
// sentence only (see user_message).
int launch(const LaunchConfig& c, std::string& error) {
  try {
    return run_launcher(c);
  } catch (const std::exception& e) {
    error = user_message(e);
    return 1;
  }
}

// all_reduce_perf over the whole job on `backend` ("ring" on host buffers, "nccl" on the GPUs).
CheckRow perf_row(const LaunchConfig& c, const EnvCheckOptions& o, const std::string& backend,
                  int store_port) {
  CheckRow row{"all", "all_reduce_perf " + backend, CheckStatus::fail, ""};
  if (::access(o.perf.c_str(), X_OK) != 0) {
    row.detail = str_cat(o.perf, " is missing (build the all_reduce_perf target)");
    return row;
  }
  ScratchFile json("perf-json");
  std::string error;
  std::vector<std::string> command = {o.perf, "-b", "8",         "-e",    "64M",    "-f",       "4",
                                      "-c",   "1",  "--backend", backend, "--json", json.path()};
  if (backend == "nccl") command.insert(command.end(), {"--device", "cuda"});
  const int rc = launch(job_like(c, command, store_port), error);
  nlohmann::json result;
  try {
    result = nlohmann::json::parse(json.read());
  } catch (const std::exception&) {  // not written here: rank 0 ran elsewhere, or failed early
  }
  if (rc != 0) {
    row.detail =
        error.empty() ? str_cat("the job failed (exit ", rc, "); see its output above") : error;
    if (result.contains("wrong") && result["wrong"].get<int64_t>() > 0)
      row.detail = str_cat(result["wrong"].get<int64_t>(), " wrong values (#wrong above)");
    return row;
  }
  row.status = CheckStatus::pass;
  row.detail = "#wrong 0";
  if (result.contains("avg_busbw"))
    row.detail = str_cat(result["world_size"].get<int>(), " ranks, #wrong 0, ", "avg busbw ",
                         result["avg_busbw"].get<double>(), " GB/s");
  return row;
}

// The NCCL sweep runs where NCCL is built in and this node has a GPU per local rank (the build
// row already holds every node to the same options); otherwise an INFO row says why not.
std::vector<CheckRow> perf_rows(const LaunchConfig& c, const EnvCheckOptions& o,
                                const std::string& report) {
  std::vector<CheckRow> rows = {perf_row(c, o, "ring", report_perf_port(report, 0))};
#ifdef HAVE_NCCL
  const int gpus = cuda_device_count();
  if (gpus >= c.nproc_per_node)
    rows.push_back(perf_row(c, o, "nccl", report_perf_port(report, 1)));
  else
    rows.push_back({"all", "all_reduce_perf nccl", CheckStatus::info,
                    str_cat("not run: ", c.nproc_per_node, " ranks per node but ", gpus,
                            " GPUs here (NCCL needs one GPU per rank)")});
#else
  rows.push_back({"all", "all_reduce_perf nccl", CheckStatus::info, "not run: built without NCCL"});
#endif
  return rows;
}

}  // namespace

int run_env_check(const LaunchConfig& c, const EnvCheckOptions& o) {
  ScratchFile report("check");
  std::vector<std::string> checker = {o.self, "--check-node", report.path()};
  if (o.worker_port != 0)
    checker.insert(checker.end(), {"--check-port", std::to_string(o.worker_port)});
  LaunchConfig nodes = job_like(c, checker, 0);
  nodes.nproc_per_node = 1;  // one checker per node

  std::string error;
  const int rc = launch(nodes, error);
  std::vector<CheckRow> rows;
  try {
    rows = parse_check_rows(report.read());
  } catch (const InvalidArgument& e) {
    error += user_message(e);
  }
  if (rows.empty())
    rows.push_back({node_label(c), "rendezvous", CheckStatus::fail,
                    error.empty() ? str_cat("the node checker failed (exit ", rc, ")") : error});
  if (all_passed(rows)) {
    for (CheckRow& row : perf_rows(c, o, report.read())) rows.push_back(std::move(row));
  } else
    rows.push_back({"all", "all_reduce_perf", CheckStatus::fail, "not run: a check above failed"});
  // Node 0 prints the table; the others say where it is, so a hostfile job shows it once.
  const int node = report_node_rank(report.read());
  if (node <= 0) {
    std::fputs(format_check_table(rows).c_str(), stdout);
  } else {
    std::printf("ringgrad-run --check: node %d: %s (the table is printed by node 0)\n", node,
                all_passed(rows) ? "every check passed" : "some checks FAILED");
  }
  std::fflush(stdout);
  return all_passed(rows) ? 0 : 1;
}

}  // namespace ringgrad::comm
