// JobEvent: the first thing that ended a generation of the job (a worker failed, a launcher
// was told to stop, a node was lost), shared between nodes through the store as JSON so every
// launcher can print the same summary, and the summary text itself.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "comm/launcher/error_file.h"
#include "comm/launcher/worker_process.h"

namespace ringgrad::comm {

struct WorkerFailure {
  int global_rank = -1;
  int local_rank = -1;
  int pid = 0;
  ExitStatus status;
  std::chrono::milliseconds stopped_for{0};  // status.stop_signal: how long it stayed stopped
  std::string time;                          // local wall-clock time the launcher saw it end
  std::vector<std::string> stderr_tail;
  std::optional<WorkerError> error;  // what its TORCHELASTIC_ERROR_FILE says, if it wrote one
};

struct JobEvent {
  enum class Kind { worker_failed, stopped, node_lost };
  Kind kind = Kind::worker_failed;
  int node_rank = -1;  // node_lost: -1 when the lost node is the store's host
  std::string hostname;
  WorkerFailure failure;  // worker_failed
  int signal = 0;         // stopped: the signal the launcher received
  std::string detail;     // node_lost: what was seen

  // A worker failure is worth a restart, and so, in an elastic job (--nnodes MIN:MAX), is a
  // lost node other than the store's host: the others re-form without it. A stop request ends
  // the job.
  bool restartable(bool elastic) const {
    return kind == Kind::worker_failed || (elastic && kind == Kind::node_lost && node_rank >= 0);
  }
  std::string to_json() const;
  static JobEvent from_json(const std::string& text);
};

std::string now_as_text();  // "2026-12-02 18:20:01"

// The block ringgrad-run prints when a job fails: the first failure's global rank, local
// rank, node, exit code or signal name, time, and its error file's exception and traceback
// (else its last stderr lines).
std::string format_summary(const JobEvent& event, int64_t generation, int restarts_used);

}  // namespace ringgrad::comm
