// Training progress for people and for programs. On a terminal: one self-updating bar
// (epoch, step/total, loss, accuracy, img/s, ETA); otherwise a plain line every log_every
// steps. JsonLog writes one JSON object per line (steps and epochs) for plots and tests.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ringgrad::nn {

struct StepStats {
  int epoch = 0, epochs = 0;
  int64_t step_in_epoch = 0, steps_in_epoch = 0, global_step = 0;
  double loss = 0, accuracy = 0, lr = 0, images_per_second = 0, eta_seconds = 0;
};

class ProgressReporter {
 public:
  ProgressReporter(bool enabled, int log_every);
  void step(const StepStats& s);
  void line(const std::string& text);  // a full line (ends the bar first)

 private:
  bool enabled_, tty_;
  int log_every_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

class JsonLog {
 public:
  // Empty path: disabled. `append`: a resumed run adds to the records of the attempt it
  // continues instead of replacing them. write() throws IoError naming the file when a record
  // cannot be written (a full disk, /dev/full): a log that silently stops is no log.
  JsonLog(const std::string& path, bool append);
  ~JsonLog();
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;
  void write(const std::string& json_object_line);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ringgrad::nn
