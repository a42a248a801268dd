// Output files checked before the work that produces them: a run that would fail to write its
// checkpoint or results at the end fails at the start instead, having lost nothing.
#pragma once
#include <cstdint>
#include <string>

namespace ringgrad {

// Throws InvalidArgument naming `flag` and what to do when `path` cannot be written: its folder
// is missing or not a folder, the path is a folder or anything else that is not a regular file
// (a device such as /dev/null, a FIFO, a socket: a file written in its place would replace it,
// or a writer would block), or a probe file cannot be created next to it (read-only, no
// permission, full). The probe is removed; an existing `path` is untouched. An empty path is
// not checked.
void check_output_path(const std::string& path, const std::string& flag);

// Throws InvalidArgument naming `flag` when the file system `path` will be written on has fewer
// than `bytes` bytes free for this user (so a full disk stops a run before its work, not at
// its end). An empty path is not checked.
void check_free_space(const std::string& path, uint64_t bytes, const std::string& flag);

}  // namespace ringgrad
