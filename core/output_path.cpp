// check_output_path: stat the path and its folder, then create and remove a probe file in the
// folder. check_free_space: statvfs of the folder.
#include "core/output_path.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/unique_fd.h"

namespace ringgrad {

namespace {

namespace fs = std::filesystem;

fs::path folder_of(const std::string& path) {
  return fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
}

const char* kind_of(const fs::file_status& status) {
  switch (status.type()) {
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_directory(status))
    RG_THROW(InvalidArgument, flag, " ", path, " is a folder; give a file name in it");
  if (fs::exists(status) && !fs::is_regular_file(status))
    RG_THROW(InvalidArgument, flag, " ", path, " is ", kind_of(status),
             ", not a regular file: ringgrad writes files only (a file written in its place "
             "would replace it); give a file path");
  const fs::path parent = folder_of(path);
  if (!fs::exists(parent, ec))
    RG_THROW(InvalidArgument, flag, " ", path, ": the folder ", parent.string(),
             " does not exist; create it first (mkdir -p ", parent.string(), ")");
  if (!fs::is_directory(parent, ec))
    RG_THROW(InvalidArgument, flag, " ", path, ": ", parent.string(), " is not a folder");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    RG_THROW(InvalidArgument, flag, " ", path,
             " exists and cannot be overwritten: ", std::strerror(errno));
  const std::string probe = (parent / (".ringgrad-probe-" + std::to_string(::getpid()))).string();
  if (!UniqueFd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)).valid())
    RG_THROW(InvalidArgument, flag, " ", path, ": cannot create a file in ", parent.string(), " (",
             std::strerror(errno), "); check its permissions and free space");
  ::unlink(probe.c_str());
}

void check_free_space(const std::string& path, uint64_t bytes, const std::string& flag) {
  if (path.empty()) return;
  const fs::path parent = folder_of(path);
  struct statvfs vfs {};
  if (::statvfs(parent.c_str(), &vfs) != 0) return;  // check_output_path names a missing folder
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < bytes)
    RG_THROW(InvalidArgument, flag, " ", path, ": the file system of ", parent.string(), " has ",
             format_bytes(static_cast<double>(free_bytes)), " free, and the file needs about ",
             format_bytes(static_cast<double>(bytes)), "; free some space or write elsewhere");
}

}  // namespace ringgrad
