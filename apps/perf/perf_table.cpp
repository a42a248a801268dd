// nccl-tests' table layout (its src/util.cu) reproduced from its format: widths, separators,
// number formats.
#include "apps/perf/perf_table.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace ringgrad::perf {

namespace {

std::string printed(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printed(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

}  // namespace

std::string fixed_width(double value, int width) {
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"})
    if (std::string s = printed(format, width, value); static_cast<int>(s.size()) <= width)
      return s;
  return printed(width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

std::string table_header(bool cputime, bool timestamps) {
  const char* time = cputime ? "cputime" : "time";
  const int stamp_width = timestamps ? 19 : 0;
  const char* stamp = timestamps ? "timestamp" : "";
  const char* stamp_format = timestamps ? "%Y-%m-%d %H:%M:%S" : "";  // as nccl-tests prints it
  return "#\n" +
         printed(
             "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
             "in-place          \n",
             "", "", "", "", "") +
         printed("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n",
                 "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time,
                 "algbw", "busbw", "#wrong", stamp_width, stamp) +
         printed("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
                 "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "", stamp_width, stamp_format);
}

std::string row_start(size_t bytes, size_t count, const std::string& type, const std::string& redop,
                      int root) {
  return printed("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type.c_str(), redop.c_str(), root);
}

std::string row_half(double time_us, double algbw, double busbw, int64_t wrong) {
  const std::string cells =
      "  " + fixed_width(time_us, 7) + "  " + fixed_width(algbw, 6) + "  " + fixed_width(busbw, 6);
  return cells + (wrong < 0 ? "    N/A" : printed("  %6g", static_cast<double>(wrong)));
}

std::string timestamp_column() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return printed("%21s", text);
}

std::string table_footer(int64_t wrong, double avg_busbw, const std::string& program) {
  return printed("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(wrong),
                 wrong ? "FAILED" : "OK") +
         printed("# %-20s : %g \n", "Avg bus bandwidth", avg_busbw) + "#\n" +
         "# Collective test concluded: " + program + "\n";
}

}  // namespace ringgrad::perf
