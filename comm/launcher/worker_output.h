// WorkerOutput: where one worker's stdout and stderr bytes go. Bytes are cut into lines; each
// line goes to the console (raw, or prefixed "[node:rank]: " for --tee), to its log file
// (--redirects/--tee), or both. The last lines of stderr are always kept for the failure
// summary, whatever the destination.
#pragma once
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ringgrad::comm {

struct WorkerOutputConfig {
  std::string prefix;           // "[0:3]: "
  int redirect_bits = 0;        // streams only written to files
  int tee_bits = 0;             // streams written to files and to the console, prefixed
  bool console = true;          // false: filtered out by --local-ranks-filter
  bool prefix_console = false;  // every console line prefixed, not only --tee's
  std::string log_dir;          // per-worker directory for stdout.log / stderr.log
  size_t tail_lines = 20;
};

class WorkerOutput {
 public:
  explicit WorkerOutput(WorkerOutputConfig config);  // creates log files when needed
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  void write(int stream, const char* data, size_t size);  // stream: 1 stdout, 2 stderr
  void finish();  // emits an unterminated last line of each stream
  std::vector<std::string> stderr_tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void emit(int stream, const std::string& line);  // line includes its '\n'

  WorkerOutputConfig config_;
  std::string pending_[3];  // incomplete line per stream
  FILE* files_[3] = {nullptr, nullptr, nullptr};
  std::deque<std::string> tail_;
};

}  // namespace ringgrad::comm
