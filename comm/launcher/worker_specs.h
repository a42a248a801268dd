// What each worker of a generation is started with: its argv (WorkerCommand), torchrun's
// environment, its output settings and its error file, in the folder of this run's per-worker
// files. Pure apart from RunFolder, which owns the temporary folder when there is no --log-dir.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "comm/launcher/launch_config.h"
#include "comm/launcher/worker_command.h"
#include "comm/launcher/worker_group.h"
#include "comm/rendezvous/rendezvous.h"

namespace ringgrad::comm {

struct Placement {  // where this generation's workers sit
  RendezvousResult round;
  std::string master_addr;
  int master_port = 0;
};

// The folder of this run's per-worker files (logs, error files): --log-dir's run folder, else a
// temporary one (torchrun makes one too) removed when the launcher ends.
class RunFolder {
 public:
  explicit RunFolder(const std::string& log_run_folder);  // throws IoError
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

// --virtual-local-rank: the GPU local rank `local_rank` gets, as the launcher's
// CUDA_VISIBLE_DEVICES lists them (GPU local_rank when unset); InvalidArgument when the list
// is too short.
std::string visible_device(int local_rank, const std::map<std::string, std::string>& base_env);

// One spec per local rank; `base_env` is the launcher's environment, which the workers inherit.
std::vector<WorkerSpec> worker_specs(const LaunchConfig& c, const WorkerCommand& command,
                                     const std::string& run_folder, const Placement& p,
                                     const std::map<std::string, std::string>& base_env);

}  // namespace ringgrad::comm
