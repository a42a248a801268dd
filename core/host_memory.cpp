// /proc/meminfo, getrlimit and a byte count for people.
#include "core/host_memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>

namespace ringgrad {

std::optional<uint64_t> mem_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    uint64_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
  return std::nullopt;
}

std::optional<uint64_t> file_size_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::nullopt;
  return static_cast<uint64_t>(limit.rlim_cur);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return text;
}

}  // namespace ringgrad
