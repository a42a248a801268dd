// Hostfile parsing (see hostfile.h for the format).
#include "comm/launcher/ssh/hostfile.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "comm/launcher/launch_config.h"
#include "core/error.h"

namespace ringgrad::comm {

namespace {
constexpr size_t kMaxHostfileBytes = 1u << 20;
}  // namespace

std::vector<HostfileEntry> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<HostfileEntry> hosts;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    HostfileEntry entry;
    if (!(words >> entry.host)) continue;  // blank or comment-only
    const std::string where = path + ":" + std::to_string(line_no);
    if (entry.host.find('=') != std::string::npos)
      RG_THROW(InvalidArgument, "hostfile ", where, ": '", entry.host,
               "' is not a host name (expected 'host slots=N')");
    // The first host is every other node's --master-addr, so each must be usable as one.
    check_host(entry.host, "hostfile " + where + ":", entry.host);
    for (std::string word; words >> word;) {
      const auto eq = word.find('=');
      if (eq == std::string::npos || eq == 0)
        RG_THROW(InvalidArgument, "hostfile ", where, ": '", word,
                 "' is not key=value (expected 'host slots=N')");
      const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
      if (key != "slots")
        RG_THROW(InvalidArgument, "hostfile ", where, ": unknown key '", key,
                 "' (the only key is slots)");
      char* end = nullptr;
      errno = 0;
      const long slots = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno == ERANGE || slots < 1 || slots > kMaxProcsPerNode)
        RG_THROW(InvalidArgument, "hostfile ", where, ": slots '", value.substr(0, 24),
                 "' must be a whole number from 1 to ", kMaxProcsPerNode);
      entry.slots = static_cast<int>(slots);
    }
    for (const auto& seen : hosts)
      if (seen.host == entry.host)
        RG_THROW(InvalidArgument, "hostfile ", where, ": host '", entry.host,
                 "' is listed twice (give it one line with all its slots)");
    hosts.push_back(entry);
  }
  if (hosts.empty()) RG_THROW(InvalidArgument, "hostfile ", path, ": no hosts in it");
  return hosts;
}

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  // A file of at most kMaxHostfileBytes: /dev/zero or a FIFO would be read until memory ran out,
  // or forever.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    RG_THROW(InvalidArgument, "hostfile '", path,
             "' is not a regular file (a device, a FIFO, a folder?); give a file of "
             "'host slots=N' lines");
  std::ifstream in(path);
  if (!in) RG_THROW(IoError, "cannot read hostfile '", path, "': ", std::strerror(errno));
  std::string text(kMaxHostfileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxHostfileBytes)
    RG_THROW(InvalidArgument, "hostfile '", path, "' is larger than ", kMaxHostfileBytes >> 20,
             " MiB; a hostfile holds one 'host slots=N' line per machine");
  return parse_hostfile(text, path);
}

}  // namespace ringgrad::comm
