// What this host can still give a process: the kernel's MemAvailable, and the file size limit
// (ulimit -f), which also bounds a shared-memory segment's size. Used to refuse, before the
// work, what would otherwise fail in the middle of it (or kill the process: SIGXFSZ).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace ringgrad {

std::optional<uint64_t> mem_available_bytes();  // /proc/meminfo's MemAvailable; none if unknown
std::optional<uint64_t> file_size_limit();      // RLIMIT_FSIZE; none when unlimited
std::string format_bytes(double bytes);         // "1.5 GiB", "512 B"

}  // namespace ringgrad
