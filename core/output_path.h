// Output files checked before the work that produces them: a run that would fail to write its
// checkpoint or results at the end fails at the start instead, having lost nothing.
#pragma once
#include <string>

namespace ringgrad {

// Throws InvalidArgument naming `flag` and what to do when `path` cannot be written: its folder
// is missing or not a folder, the path is a folder, or a probe file cannot be created next to
// it (read-only, no permission, full). The probe is removed; an existing `path` is untouched.
// An empty path is not checked.
void check_output_path(const std::string& path, const std::string& flag);

}  // namespace ringgrad
