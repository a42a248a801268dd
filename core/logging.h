// Leveled logging to stderr with a rank prefix: "[ringgrad rank 1 W 17:50:01] message".
// Level from RINGGRAD_LOG=debug|info|warn|error (default info); rank from set_log_rank() or,
// until it is called, the RANK environment variable. Thread-safe: one line per call.
#pragma once
#include "core/error.h"

namespace ringgrad {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void set_log_rank(int rank);  // -1: no rank prefix
void log_line(LogLevel level, const std::string& message);

template <class... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::debug) log_line(LogLevel::debug, str_cat(args...));
}
template <class... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::info) log_line(LogLevel::info, str_cat(args...));
}
template <class... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::warn) log_line(LogLevel::warn, str_cat(args...));
}
template <class... Args>
void log_error(const Args&... args) {
  log_line(LogLevel::error, str_cat(args...));
}

}  // namespace ringgrad
