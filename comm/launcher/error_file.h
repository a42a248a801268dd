// The error file of a worker, as torchrun reads it: the launcher names a file per worker in
// TORCHELASTIC_ERROR_FILE, a script whose entry point PyTorch's @record decorates writes its
// uncaught exception there as JSON ({"message": {"message": "ValueError: ...", "extraInfo":
// {"py_callstack": "Traceback ...", "timestamp": "..."}}}), and the failure summary shows it.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ringgrad::comm {

struct WorkerError {
  std::string message;                 // "ValueError: bad batch"
  std::vector<std::string> traceback;  // its lines, the last kMaxTracebackLines kept
};

constexpr size_t kMaxTracebackLines = 40;

// nullopt when there is no file, or it is not the JSON above (a half-written file, another
// tool's): the summary then falls back to the worker's stderr.
std::optional<WorkerError> read_error_file(const std::string& path);

}  // namespace ringgrad::comm
