// Logging implementation.
#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "core/env.h"

namespace ringgrad {

namespace {

LogLevel parse_level() {
  std::string v = env_str("RINGGRAD_LOG", "info");
  if (v == "debug") return LogLevel::debug;
  if (v == "warn" || v == "warning") return LogLevel::warn;
  if (v == "error") return LogLevel::error;
  return LogLevel::info;
}

std::atomic<int>& level_store() {
  static std::atomic<int> level{static_cast<int>(parse_level())};
  return level;
}

std::atomic<int>& rank_store() {
  static std::atomic<int> rank{static_cast<int>(env_int("RANK", -1))};
  return rank;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_store().load()); }
void set_log_level(LogLevel level) { level_store() = static_cast<int>(level); }
void set_log_rank(int rank) { rank_store() = rank; }

void log_line(LogLevel level, const std::string& message) {
  static std::mutex mu;
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  int rank = rank_store().load();
  std::lock_guard<std::mutex> lock(mu);
  if (rank >= 0)
    std::fprintf(stderr, "[ringgrad rank %d %c %s] %s\n", rank, kLetters[static_cast<int>(level)],
                 clock, message.c_str());
  else
    std::fprintf(stderr, "[ringgrad %c %s] %s\n", kLetters[static_cast<int>(level)], clock,
                 message.c_str());
}

}  // namespace ringgrad
