// Worker specs: torchrun's worker environment and the per-worker files.
#include "comm/launcher/worker_specs.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/hostname.h"

namespace ringgrad::comm {

RunFolder::RunFolder(const std::string& log_run_folder) : path_(log_run_folder) {
  if (!path_.empty()) return;
  std::string templ = (std::filesystem::temp_directory_path() / "ringgrad-run-XXXXXX").string();
  if (!::mkdtemp(templ.data()))
    RG_THROW(IoError, "cannot create a temporary folder ", templ,
             " for the workers' error files: ", std::strerror(errno),
             " (set TMPDIR, or give --log-dir)");
  path_ = templ;
  owned_ = true;
}

RunFolder::~RunFolder() {
  std::error_code ignored;
  if (owned_) std::filesystem::remove_all(path_, ignored);
}

std::string visible_device(int local_rank, const std::map<std::string, std::string>& base_env) {
  const auto it = base_env.find("CUDA_VISIBLE_DEVICES");
  if (it == base_env.end()) return str_cat(local_rank);
  std::vector<std::string> devices;
  std::istringstream list(it->second);
  for (std::string d; std::getline(list, d, ',');) devices.push_back(d);
  if (local_rank >= static_cast<int>(devices.size()))
    RG_THROW(InvalidArgument, "--virtual-local-rank: local rank ", local_rank,
             " has no GPU in CUDA_VISIBLE_DEVICES=", it->second,
             " (list one per worker, or lower --nproc-per-node)");
  return devices[local_rank];
}

std::vector<WorkerSpec> worker_specs(const LaunchConfig& c, const WorkerCommand& command,
                                     const std::string& run_folder, const Placement& p,
                                     const std::map<std::string, std::string>& base_env) {
  std::vector<WorkerSpec> specs;
  const std::string host = hostname();
  for (int local = 0; local < c.nproc_per_node; ++local) {
    WorkerSpec spec;
    spec.local_rank = local;
    spec.global_rank = p.round.rank_offset + local;
    spec.command = command.argv(local);
    const std::string folder = str_cat(run_folder, "/attempt_", p.round.generation, "/", local);
    spec.error_file = folder + "/error.json";
    auto env = base_env;
    const auto set = [&](const char* k, const auto& v) { env[k] = str_cat(v); };
    set("RANK", spec.global_rank);
    set("LOCAL_RANK", local);
    set("WORLD_SIZE", p.round.world_size);
    set("LOCAL_WORLD_SIZE", c.nproc_per_node);
    set("GROUP_RANK", p.round.node_rank);
    set("GROUP_WORLD_SIZE", p.round.num_nodes);
    set("ROLE_NAME", c.role);
    set("ROLE_RANK", spec.global_rank);
    set("ROLE_WORLD_SIZE", p.round.world_size);
    set("MASTER_ADDR", p.master_addr);
    set("MASTER_PORT", p.master_port);
    set("TORCHELASTIC_RESTART_COUNT", p.round.generation);
    set("TORCHELASTIC_MAX_RESTARTS", c.max_restarts);
    set("TORCHELASTIC_RUN_ID", c.rdzv_id);
    // MASTER_PORT is this generation's workers' port of the launchers' store, which speaks
    // PyTorch's protocol too: PyTorch's env:// init becomes its client, as under torchrun
    // (Note [One store per job] in comm/store/tcp_store_server.cpp).
    set("TORCHELASTIC_USE_AGENT_STORE", "True");
    set("TORCHELASTIC_ERROR_FILE", spec.error_file);  // PyTorch's @record writes it
    set("TORCHELASTIC_SIGNALS_TO_HANDLE", c.signals_to_handle);
    if (!env.count("TORCH_NCCL_ASYNC_ERROR_HANDLING")) set("TORCH_NCCL_ASYNC_ERROR_HANDLING", 1);
    if (c.virtual_local_rank) {
      set("LOCAL_RANK", 0);
      set("CUDA_VISIBLE_DEVICES", visible_device(local, base_env));
    }
    if (!env.count("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", 1);
    // ringgrad's own clients say hello with the job's token.
    if (!c.token.empty()) set("RINGGRAD_STORE_TOKEN", c.token);
    for (const auto& [k, v] : env) spec.env.push_back(k + "=" + v);
    const std::string node = c.console_label.empty() ? str_cat(p.round.node_rank) : c.console_label;
    spec.output.prefix = c.log_line_prefix_template.empty()
                             ? str_cat("[", node, ":", spec.global_rank, "]: ")
                             : expand_prefix_template(c.log_line_prefix_template, c.role,
                                                      spec.global_rank, local, host);
    spec.output.prefix_console = !c.console_label.empty();
    spec.output.redirect_bits = c.redirects.for_rank(local);
    spec.output.tee_bits = c.tee.for_rank(local);
    spec.output.console = c.local_ranks_filter.empty() || c.local_ranks_filter.count(local);
    spec.output.log_dir = folder;
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace ringgrad::comm
