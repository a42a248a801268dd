// WorkerOutput implementation.
#include "comm/launcher/worker_output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ringgrad::comm {

namespace {
constexpr size_t kMaxLineBytes = 64 << 10;

void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos < path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      RG_THROW(IoError, "cannot create log directory '", prefix, "': ", std::strerror(errno));
  }
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed console must not stop the launcher
    done += static_cast<size_t>(n);
  }
}
}  // namespace

WorkerOutput::WorkerOutput(WorkerOutputConfig config) : config_(std::move(config)) {
  const int file_bits = config_.redirect_bits | config_.tee_bits;
  if (!file_bits) return;
  make_dirs(config_.log_dir);
  const char* names[3] = {nullptr, "stdout.log", "stderr.log"};
  for (int stream = 1; stream <= 2; ++stream) {
    if (!(file_bits & stream)) continue;
    const std::string path = config_.log_dir + "/" + names[stream];
    files_[stream] = std::fopen(path.c_str(), "w");
    if (!files_[stream])
      RG_THROW(IoError, "cannot open worker log '", path, "': ", std::strerror(errno));
  }
}

WorkerOutput::~WorkerOutput() {
  for (FILE* f : files_)
    if (f) std::fclose(f);
}

void WorkerOutput::write(int stream, const char* data, size_t size) {
  std::string& pending = pending_[stream];
  pending.append(data, size);
  size_t start = 0;
  for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(stream, pending.substr(start, nl + 1 - start));
  pending.erase(0, start);
  // A line that never ends (progress bars redrawn with '\r') is passed on in pieces.
  if (pending.size() > kMaxLineBytes) {
    emit(stream, pending + "\n");
    pending.clear();
  }
}

void WorkerOutput::finish() {
  for (int stream = 1; stream <= 2; ++stream) {
    if (!pending_[stream].empty()) emit(stream, pending_[stream] + "\n");
    pending_[stream].clear();
    if (files_[stream]) std::fflush(files_[stream]);
  }
}

void WorkerOutput::emit(int stream, const std::string& line) {
  if (stream == 2) {
    tail_.push_back(line.substr(0, line.size() - 1));
    if (tail_.size() > config_.tail_lines) tail_.pop_front();
  }
  const int bit = stream;  // 1 stdout, 2 stderr: the same numbering as the flags' bits
  if (files_[stream]) {
    std::fwrite(line.data(), 1, line.size(), files_[stream]);
    std::fflush(files_[stream]);
  }
  const bool tee = config_.tee_bits & bit;
  if (!config_.console || ((config_.redirect_bits & bit) && !tee)) return;
  const int fd = stream == 1 ? STDOUT_FILENO : STDERR_FILENO;
  write_all(fd, tee || config_.prefix_console ? config_.prefix + line : line);
}

}  // namespace ringgrad::comm
