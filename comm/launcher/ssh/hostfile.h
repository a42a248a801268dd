// Hostfile: the list of machines for `ringgrad-run --hostfile FILE`, in the format mpirun and
// DeepSpeed use: one `host slots=N` per line, `#` starts a comment, blank lines are ignored.
// The first host is node 0. Parsing is a pure function so its errors can be unit-tested; each
// error is one line naming the file, the line number and what is wrong.
#pragma once
#include <string>
#include <vector>

namespace ringgrad::comm {

struct HostfileEntry {
  std::string host;  // as ssh should reach it ("localhost" allowed)
  int slots = 1;     // workers on this host (its --nproc-per-node)
  bool operator==(const HostfileEntry& o) const { return host == o.host && slots == o.slots; }
};

// `text` is the file's contents, `path` only names it in errors. Throws InvalidArgument for a
// malformed line, an unknown key, slots <= 0, a host listed twice, or a file without hosts.
std::vector<HostfileEntry> parse_hostfile(const std::string& text, const std::string& path);

// Reads and parses `path`; IoError when it cannot be read.
std::vector<HostfileEntry> read_hostfile(const std::string& path);

}  // namespace ringgrad::comm
