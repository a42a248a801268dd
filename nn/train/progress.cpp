// Progress bar, plain progress lines and the JSON-lines log.
#include "nn/train/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ringgrad::nn {

namespace {

std::string format_duration(double seconds) {
  const long s = seconds > 0 ? static_cast<long>(seconds + 0.5) : 0;
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

ProgressReporter::ProgressReporter(bool enabled, int log_every)
    : enabled_(enabled),
      tty_(isatty(STDOUT_FILENO) != 0),
      log_every_(log_every > 0 ? log_every : 50) {}

void ProgressReporter::step(const StepStats& s) {
  if (!enabled_) return;
  char stats[160];
  std::snprintf(stats, sizeof stats, "loss %.4f  acc %5.1f%%  %6.0f img/s  ETA %s", s.loss,
                100 * s.accuracy, s.images_per_second, format_duration(s.eta_seconds).c_str());
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    const bool last = s.step_in_epoch == s.steps_in_epoch;
    if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled =
        s.steps_in_epoch ? static_cast<int>(kWidth * s.step_in_epoch / s.steps_in_epoch) : 0;
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::printf("\repoch %d/%d [%s] %lld/%lld  %s", s.epoch, s.epochs, bar.c_str(),
                static_cast<long long>(s.step_in_epoch), static_cast<long long>(s.steps_in_epoch),
                stats);
    std::fflush(stdout);
    bar_open_ = true;
    return;
  }
  if (s.step_in_epoch % log_every_ != 0 && s.step_in_epoch != s.steps_in_epoch) return;
  std::printf("epoch %d/%d step %lld/%lld  %s\n", s.epoch, s.epochs,
              static_cast<long long>(s.step_in_epoch), static_cast<long long>(s.steps_in_epoch),
              stats);
  std::fflush(stdout);
}

void ProgressReporter::line(const std::string& text) {
  if (!enabled_) return;
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

JsonLog::JsonLog(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_) RG_THROW(IoError, "cannot open --log-json file ", path, ": ", std::strerror(errno));
}

JsonLog::~JsonLog() {
  if (file_) std::fclose(file_);
}

void JsonLog::write(const std::string& line) {
  if (!file_) return;
  if (std::fprintf(file_, "%s\n", line.c_str()) < 0 || std::fflush(file_) != 0)
    RG_THROW(IoError, "cannot write to --log-json file ", path_, ": ", std::strerror(errno));
}

}  // namespace ringgrad::nn
