// Parsing and validation of ringgrad-run's configuration.
#include "comm/launcher/launch_config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ringgrad::comm {

namespace {

int parse_int(const std::string& text, const char* flag, const std::string& whole) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < INT32_MIN || v > INT32_MAX)
    RG_THROW(InvalidArgument, flag, " '", whole, "': '", text, "' is not an integer");
  return static_cast<int>(v);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

int count_gpus() {
  // The NVIDIA driver lists one directory per GPU; no CUDA runtime is needed to count them.
  int n = 0;
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

int count_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
}

// Seconds from 0 (only where `zero_ok`; a zero timeout would fail every wait at once) to
// kMaxSeconds; NaN, infinities and overflowing values are refused like any other bad number.
std::chrono::milliseconds parse_seconds(const std::string& value, const char* key, bool zero_ok) {
  constexpr double kMaxSeconds = 1e7;
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(s) || s < 0 || s > kMaxSeconds ||
      (s == 0 && !zero_ok))
    RG_THROW(InvalidArgument, "--rdzv-conf ", key, "=", value.substr(0, 24),
             ": need a finite number of seconds ", zero_ok ? "from 0" : "above 0", " up to ",
             static_cast<int64_t>(kMaxSeconds));
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

bool is_ipv4_address(const std::string& text) {
  in_addr ignored{};
  return ::inet_pton(AF_INET, text.c_str(), &ignored) == 1;
}

}  // namespace

void check_host(const std::string& host, const std::string& where, const std::string& value) {
  if (host.empty()) RG_THROW(InvalidArgument, where, " '", value, "': empty host");
  // A leading '-' would reach ssh (--hostfile) as an option rather than a host.
  if (host[0] == '-' ||
      host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
          std::string::npos)
    RG_THROW(InvalidArgument, where, " '", value.substr(0, 64), "': '", host.substr(0, 64),
             "' is not a host name or IPv4 address",
             host.find(':') != std::string::npos ? " (IPv6 addresses are not supported yet)" : "");
}

int StreamSelection::for_rank(int local_rank) const {
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? all : it->second;
}

std::pair<int, int> parse_nnodes(const std::string& value) {
  auto colon = value.find(':');
  int lo = parse_int(value.substr(0, colon), "--nnodes", value);
  int hi = colon == std::string::npos ? lo : parse_int(value.substr(colon + 1), "--nnodes", value);
  if (lo < 1 || hi < lo || hi > kMaxNodes)
    RG_THROW(InvalidArgument, "--nnodes '", value,
             "': need N or MIN:MAX with 1 <= MIN <= MAX <= ", kMaxNodes);
  return {lo, hi};
}

int parse_nproc_per_node(const std::string& value) {
  if (value == "cpu") return count_cpus();
  if (value == "gpu" || value == "auto") {
    const int gpus = count_gpus();
    if (value == "gpu" && gpus == 0)
      RG_THROW(InvalidArgument, "--nproc-per-node gpu: no NVIDIA GPU found on this host");
    return gpus > 0 ? gpus : count_cpus();
  }
  int n = parse_int(value, "--nproc-per-node", value);
  if (n < 1 || n > kMaxProcsPerNode)
    RG_THROW(InvalidArgument, "--nproc-per-node '", value, "': need a count from 1 to ",
             kMaxProcsPerNode, ", or auto, cpu, gpu");
  return n;
}

std::pair<std::string, int> parse_endpoint(const std::string& value, int default_port) {
  if (!value.empty() && value[0] == '[')
    RG_THROW(InvalidArgument, "--rdzv-endpoint '", value,
             "': IPv6 endpoints are not supported yet; use an IPv4 address or a host name");
  std::string host = value, port;
  if (auto colon = value.find(':'); colon != std::string::npos) {
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (port.find(':') != std::string::npos)
      RG_THROW(InvalidArgument, "--rdzv-endpoint '", value,
               "': more than one ':' (use host:port; IPv6 addresses are not supported yet)");
    if (port.empty())
      RG_THROW(InvalidArgument, "--rdzv-endpoint '", value,
               "': empty port after ':' (use host:port, or host alone for port ", default_port,
               ")");
  }
  check_host(host, "--rdzv-endpoint", value);
  int p = port.empty() ? default_port : parse_int(port, "--rdzv-endpoint", value);
  if (p < 0 || p > 65535)
    RG_THROW(InvalidArgument, "--rdzv-endpoint '", value, "': port ", p, " is not in 0..65535");
  return {host, p};
}

std::map<std::string, std::string> parse_key_values(const std::string& value, const char* flag) {
  std::map<std::string, std::string> out;
  for (const auto& item : split(value, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    // After a token= the item is most likely the token's own tail: say so, and show nothing.
    if ((eq == std::string::npos || eq == 0) && out.count("token"))
      RG_THROW(InvalidArgument, flag,
               ": an item after token= is not key=value (not shown: it is "
               "likely part of the token); a token with ',' goes in a file (token_file=PATH) or "
               "RINGGRAD_STORE_TOKEN");
    if (eq == std::string::npos || eq == 0)
      RG_THROW(InvalidArgument, flag, " '", value, "': '", item, "' is not key=value");
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

StreamSelection parse_stream_selection(const std::string& value, const char* flag) {
  StreamSelection sel;
  auto bits = [&](const std::string& text) {
    int b = parse_int(text, flag, value);
    if (b < 0 || b > 3)
      RG_THROW(InvalidArgument, flag, " '", value, "': ", b,
               " is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
    return b;
  };
  if (value.find(':') == std::string::npos) {
    sel.all = bits(value);
    return sel;
  }
  for (const auto& item : split(value, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      RG_THROW(InvalidArgument, flag, " '", value, "': '", item, "' is not local_rank:bits");
    sel.per_rank[parse_int(item.substr(0, colon), flag, value)] = bits(item.substr(colon + 1));
  }
  return sel;
}

std::set<int> parse_rank_list(const std::string& value, const char* flag) {
  std::set<int> ranks;
  for (const auto& item : split(value, ','))
    if (!item.empty()) ranks.insert(parse_int(item, flag, value));
  return ranks;
}

std::vector<int> parse_signal_list(const std::string& value) {
  std::vector<int> signals;
  for (std::string name : split(value, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (name.empty()) continue;
    int number = 0;
    for (int s = 1; s < NSIG && !number; ++s)
      if (const char* abbrev = sigabbrev_np(s); abbrev && name == std::string("SIG") + abbrev)
        number = s;
    if (!number)
      RG_THROW(InvalidArgument, "--signals-to-handle '", value, "': '", name,
               "' is not a signal name (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, ...)");
    if (number == SIGKILL || number == SIGSTOP || number == SIGCHLD)
      RG_THROW(InvalidArgument, "--signals-to-handle '", value, "': ", name,
               name == "SIGCHLD" ? " is how the launcher learns a worker ended"
                                 : " cannot be caught by any program",
               "; leave it out");
    signals.push_back(number);
  }
  if (signals.empty())
    RG_THROW(InvalidArgument, "--signals-to-handle '", value,
             "': no signal named; the launcher needs at least one to stop the job (default "
             "SIGTERM,SIGINT,SIGHUP,SIGQUIT)");
  return signals;
}

std::string expand_prefix_template(const std::string& templ, const std::string& role_name, int rank,
                                   int local_rank, const std::string& hostname) {
  const std::pair<const char*, std::string> values[] = {{"role_name", role_name},
                                                        {"rank", std::to_string(rank)},
                                                        {"local_rank", std::to_string(local_rank)},
                                                        {"hostname", hostname}};
  std::string out;
  for (size_t i = 0; i < templ.size(); ++i) {
    if (templ[i] != '$' || i + 1 == templ.size()) {
      out += templ[i];
      continue;
    }
    if (templ[i + 1] == '$') {  // "$$" is a literal '$'
      out += '$';
      ++i;
      continue;
    }
    const bool braced = templ[i + 1] == '{';
    const size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    while (end < templ.size() &&
           (std::isalnum(static_cast<unsigned char>(templ[end])) || templ[end] == '_'))
      ++end;
    const std::string name = templ.substr(start, end - start);
    const bool closed = !braced || (end < templ.size() && templ[end] == '}');
    bool replaced = false;
    for (const auto& [key, value] : values)
      if (closed && name == key) {
        out += value;
        replaced = true;
      }
    if (!replaced) {
      out += '$';
      continue;
    }
    i = end - (braced ? 0 : 1);
  }
  return out;
}

namespace {

// A token must fit a store hello (kMaxHelloBytes) with room to spare.
constexpr size_t kMaxTokenBytes = 1024;

// The token as the first line of a file only its owner should read: unlike token=, it does not
// show in `ps` (nor, under --hostfile, in the ssh command lines).
std::string read_token_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    RG_THROW(InvalidArgument, "--rdzv-conf token_file=", path.substr(0, 128),
             ": not a readable regular file");
  std::ifstream in(path);
  std::string token(kMaxTokenBytes + 1, '\0');
  in.read(token.data(), static_cast<std::streamsize>(token.size()));
  if (in.bad())
    RG_THROW(InvalidArgument, "--rdzv-conf token_file=", path.substr(0, 128), ": cannot read it");
  token.resize(static_cast<size_t>(in.gcount()));
  token = token.substr(0, token.find('\n'));
  if (token.size() > kMaxTokenBytes)
    RG_THROW(InvalidArgument, "--rdzv-conf token_file=", path.substr(0, 128),
             ": its first line is longer than ", kMaxTokenBytes, " bytes; is it the token?");
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty())
    RG_THROW(InvalidArgument, "--rdzv-conf token_file=", path.substr(0, 128),
             ": its first line is empty; put the job's token there");
  return token;
}

}  // namespace

void apply_rdzv_conf(LaunchConfig& config, const std::map<std::string, std::string>& conf) {
  if (conf.count("token") && conf.count("token_file"))
    RG_THROW(InvalidArgument, "--rdzv-conf: give token or token_file, not both");
  for (const auto& [key, value] : conf) {
    if (key == "timeout" || key == "join_timeout")
      config.rdzv_timeout = parse_seconds(value, key.c_str(), /*zero_ok=*/false);
    else if (key == "last_call_timeout")
      config.last_call_timeout = parse_seconds(value, key.c_str(), /*zero_ok=*/true);
    else if (key == "connect_timeout" || key == "read_timeout")
      config.connect_timeout = parse_seconds(value, key.c_str(), /*zero_ok=*/false);
    else if (key == "keep_alive_timeout")
      config.keep_alive_timeout = parse_seconds(value, key.c_str(), /*zero_ok=*/false);
    else if (key == "token" && value.empty())  // token=$SECRET with SECRET unset
      RG_THROW(InvalidArgument,
               "--rdzv-conf token= is empty (an unset variable?); give the "
               "job's token, or leave token out to run without one");
    else if (key == "token")
      config.token = value;
    else if (key == "token_file")
      config.token = read_token_file(value);
    else if (key == "bind_addr" && !is_ipv4_address(value))
      RG_THROW(InvalidArgument, "--rdzv-conf bind_addr=", value.substr(0, 64),
               ": not an IPv4 address (give one of this host's addresses, or 0.0.0.0 for all)");
    else if (key == "bind_addr")
      config.bind_addr = value;
    else
      RG_THROW(InvalidArgument, "--rdzv-conf: unknown key '", key,
               "' (known: timeout, last_call_timeout, connect_timeout, keep_alive_timeout, token, "
               "token_file, bind_addr)");
  }
}

void validate(LaunchConfig& config) {
  if (config.command.empty())
    RG_THROW(InvalidArgument,
             "no program to run: usage is ringgrad-run [options] PROGRAM [ARGS...]");
  if (config.command[0].size() > 1 && config.command[0][0] == '-')
    RG_THROW(InvalidArgument, "unknown option '", config.command[0], "'");
  if (config.nproc_per_node < 1)
    RG_THROW(InvalidArgument, "--nproc-per-node ", config.nproc_per_node, ": need at least 1");
  // The run id names the job's folder in --log-dir: '/', '..' or an empty id would put logs
  // outside it, or into it bare.
  const std::string& id = config.rdzv_id;
  const bool control_char = std::any_of(id.begin(), id.end(), [](char ch) {
    return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
  });
  if (id.empty() || id == "." || id == ".." || id.size() > 255 ||
      id.find('/') != std::string::npos || control_char)
    RG_THROW(InvalidArgument, "--rdzv-id '", id.substr(0, 64),
             "': give a name of 1 to 255 characters without '/' or control characters, other "
             "than '.' and '..' (it names the run's folder in --log-dir)");
  if (config.rdzv_backend != "static" && config.rdzv_backend != "c10d")
    RG_THROW(InvalidArgument, "--rdzv-backend '", config.rdzv_backend,
             "' is not supported (use c10d or static)");
  if (config.standalone) {
    if (config.max_nodes != 1)
      RG_THROW(InvalidArgument, "--standalone runs one node, but --nnodes asks for ",
               config.min_nodes, ":", config.max_nodes);
    if (!config.rdzv_host.empty())
      RG_THROW(InvalidArgument,
               "--standalone picks its own store on a free loopback port, so "
               "--rdzv-endpoint ",
               config.rdzv_host, ":", config.rdzv_port, " would be ignored; drop one of them");
    config.rdzv_backend = "c10d";
    config.rdzv_host = "127.0.0.1";
    config.rdzv_port = 0;
    config.node_rank = 0;
  }
  if (config.node_rank >= config.max_nodes)
    RG_THROW(InvalidArgument, "--node-rank ", config.node_rank, " must be below --nnodes ",
             config.max_nodes, " (node ranks are 0..", config.max_nodes - 1, ")");
  if (config.node_rank < -1)
    RG_THROW(InvalidArgument, "--node-rank ", config.node_rank, " is negative");
  if (config.rdzv_backend == "static") {
    check_host(config.master_addr, "--master-addr", config.master_addr);
    if (config.min_nodes != config.max_nodes)
      RG_THROW(InvalidArgument, "--nnodes ", config.min_nodes, ":", config.max_nodes,
               ": a MIN:MAX range needs --rdzv-backend c10d");
    if (config.node_rank < 0) {
      if (config.max_nodes > 1)
        RG_THROW(InvalidArgument, "--rdzv-backend static with --nnodes ", config.max_nodes,
                 " needs --node-rank (or use --rdzv-backend c10d to assign node ranks)");
      config.node_rank = 0;
    }
    if (config.master_port == 0 && config.max_nodes > 1)
      RG_THROW(InvalidArgument,
               "--master-port 0 picks a port on one host only; give a fixed "
               "port when --nnodes > 1");
    if (config.master_port < 0 || config.master_port > 65535)
      RG_THROW(InvalidArgument, "--master-port ", config.master_port, " is not in 0..65535");
  } else if (config.rdzv_host.empty()) {
    RG_THROW(InvalidArgument, "--rdzv-backend c10d needs --rdzv-endpoint host[:port]");
  } else if (config.rdzv_port == 0 && config.max_nodes > 1) {
    RG_THROW(InvalidArgument, "--rdzv-endpoint ", config.rdzv_host,
             ":0 picks a port on one host only; give a fixed port when --nnodes > 1");
  }
  if (config.max_restarts < 0)
    RG_THROW(InvalidArgument, "--max-restarts ", config.max_restarts, " is negative");
  if (config.monitor_interval.count() <= 0)
    RG_THROW(InvalidArgument, "--monitor-interval must be positive");
  // A launcher beats once per --monitor-interval at best: an interval longer than a third of
  // keep_alive_timeout would have the other nodes take a healthy node for lost.
  if (config.max_nodes > 1 && config.monitor_interval * 3 > config.keep_alive_timeout)
    RG_THROW(InvalidArgument, "--monitor-interval ", config.monitor_interval.count() / 1000.0,
             " s: a node checks in once per interval, so with keep_alive_timeout ",
             config.keep_alive_timeout.count() / 1000.0,
             " s the others would take it for lost; use at most a third of it, or raise "
             "--rdzv-conf keep_alive_timeout");
  if (!config.local_addr.empty()) check_host(config.local_addr, "--local-addr", config.local_addr);
  parse_signal_list(config.signals_to_handle);
  if (config.role.empty())
    RG_THROW(InvalidArgument, "--role: give a name (it is each worker's ROLE_NAME)");
  const bool wants_files = config.redirects.all || config.tee.all ||
                           !config.redirects.per_rank.empty() || !config.tee.per_rank.empty();
  if (wants_files && config.log_dir.empty())
    RG_THROW(InvalidArgument, "--redirects/--tee write per-rank log files: give --log-dir DIR");
}

std::string make_log_run_folder(const std::string& log_dir, const std::string& run_id) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec || !std::filesystem::is_directory(log_dir))
    RG_THROW(InvalidArgument, "--log-dir ", log_dir, ": cannot create it (",
             ec ? ec.message() : "a file of that name exists", ")");
  // mkdir is atomic: of two launchers racing for a name, one gets it and the other the next.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::string folder =
        str_cat(log_dir, "/", run_id, attempt ? str_cat(".", attempt) : std::string());
    if (::mkdir(folder.c_str(), 0755) == 0) return folder;
    if (errno != EEXIST)
      RG_THROW(InvalidArgument, "--log-dir ", log_dir, ": cannot create ", folder, " (",
               std::strerror(errno), "); check its permissions and free space");
  }
  RG_THROW(InvalidArgument, "--log-dir ", log_dir, " already holds 1000 runs named '", run_id,
           "'; clean it up or use another --rdzv-id");
}

}  // namespace ringgrad::comm
