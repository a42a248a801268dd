// LaunchConfig: everything ringgrad-run was asked to do, with torchrun's flag semantics, and
// the parsers for its compact flag values (--nnodes 1:4, --rdzv-endpoint host:port,
// --rdzv-conf k=v,..., --redirects 3 or 0:1,1:2). Every parser and validate() throws
// InvalidArgument with one line naming the flag and what would be valid.
#pragma once
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/launcher/worker_command.h"

namespace ringgrad::comm {

// Which of a worker's streams a --redirects/--tee setting applies to: 1 stdout, 2 stderr, 3 both.
struct StreamSelection {
  int all = 0;                  // applies to every local rank not in per_rank
  std::map<int, int> per_rank;  // local rank -> bits
  int for_rank(int local_rank) const;
};

struct LaunchConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  int node_rank = -1;  // -1: assigned by the rendezvous (0 for the static backend)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_id = "none";
  std::string rdzv_backend = "static";  // "static" or "c10d"
  std::string rdzv_host;                // c10d endpoint
  int rdzv_port = 29400;
  // --rdzv-conf: timeout, last_call_timeout, connect_timeout, keep_alive_timeout (seconds),
  // token, bind_addr.
  std::chrono::milliseconds rdzv_timeout{900'000};
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds connect_timeout{60'000};
  std::chrono::milliseconds keep_alive_timeout{30'000};  // a node silent this long is lost
  std::string token;
  std::string bind_addr;  // empty: loopback for one node, all interfaces otherwise
  bool standalone = false;
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds stop_grace{5'000};  // SIGTERM -> SIGKILL
  // A worker stopped (SIGSTOP, SIGTSTP, ...) this long fails the job: frozen, it would hold the
  // others in their collective for the whole collective timeout.
  std::chrono::milliseconds stopped_timeout{10'000};
  std::string log_dir;
  std::string log_run_folder;  // this run's folder in log_dir (make_log_run_folder)
  StreamSelection redirects;
  StreamSelection tee;
  std::set<int> local_ranks_filter;  // empty: every local rank on the console
  std::vector<std::string> command;  // program and its arguments
  // How the program runs (worker_command.h): -m, --no-python, --run-path, the legacy
  // torch.distributed.launch convention and its --use-env.
  Invocation invocation = Invocation::automatic;
  LaunchConvention convention = LaunchConvention::torchrun;
  bool use_env = false;
  // torchrun's worker-side settings:
  std::string role = "default";  // ROLE_NAME
  std::string local_addr;        // the address the other nodes reach this one at (MASTER_ADDR)
  std::string log_line_prefix_template;  // --tee's console prefix; empty: "[node:rank]: "
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // stop the job, forwarded
  bool virtual_local_rank = false;  // LOCAL_RANK=0, CUDA_VISIBLE_DEVICES = the worker's GPU
  // Set by --hostfile on each remote launcher it starts over SSH:
  std::string console_label;       // non-empty: every console line gets "[label:rank]: "
  bool stop_on_stdin_eof = false;  // stdin closing (the SSH session ended) stops the job
};

constexpr int kMaxNodes = 100'000;
constexpr int kMaxProcsPerNode = 1024;

// "2" -> {2, 2}; "1:4" -> {1, 4}.
std::pair<int, int> parse_nnodes(const std::string& value);
// "4", "auto" (GPUs if any, else CPUs), "cpu", "gpu".
int parse_nproc_per_node(const std::string& value);
// "host:port" (port may be omitted: default_port); an IPv6 "[::1]:port" is refused clearly.
std::pair<std::string, int> parse_endpoint(const std::string& value, int default_port);
// LOG_DIR/RUN_ID, or RUN_ID.1, .2, ... when taken, so that a run never writes over another's
// logs; created here (throws InvalidArgument when LOG_DIR cannot be created or written).
std::string make_log_run_folder(const std::string& log_dir, const std::string& run_id);
// A host name or IPv4 address, else InvalidArgument "WHERE 'VALUE': 'HOST' is not ...":
// anything else (a second ':', brackets, '@', spaces) would only fail later, after a long
// wait, as a DNS error on another node.
void check_host(const std::string& host, const std::string& where, const std::string& value);
// "k=v,k2=v2"
std::map<std::string, std::string> parse_key_values(const std::string& value, const char* flag);
// "3" or "0:1,1:2" (local rank : bits)
StreamSelection parse_stream_selection(const std::string& value, const char* flag);
std::set<int> parse_rank_list(const std::string& value, const char* flag);
// "SIGTERM,SIGUSR1" -> their numbers; SIGKILL, SIGSTOP and SIGCHLD cannot be handled.
std::vector<int> parse_signal_list(const std::string& value);
// --log-line-prefix-template: ${role_name}, ${rank}, ${local_rank}, ${hostname} (or $name)
// replaced, anything else kept as written (Python's Template.safe_substitute).
std::string expand_prefix_template(const std::string& templ, const std::string& role_name, int rank,
                                   int local_rank, const std::string& hostname);

// Applies --rdzv-conf values and checks every cross-flag rule (node rank below nnodes,
// --standalone, the backend name, an endpoint for c10d, ...).
void apply_rdzv_conf(LaunchConfig& config, const std::map<std::string, std::string>& conf);
void validate(LaunchConfig& config);

}  // namespace ringgrad::comm
