// check_output_path: stat the folder, then create and remove a probe file in it.
#include "core/output_path.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ringgrad {

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    RG_THROW(InvalidArgument, flag, " ", path, " is a folder; give a file name in it");
  const fs::path parent =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::exists(parent, ec))
    RG_THROW(InvalidArgument, flag, " ", path, ": the folder ", parent.string(),
             " does not exist; create it first (mkdir -p ", parent.string(), ")");
  if (!fs::is_directory(parent, ec))
    RG_THROW(InvalidArgument, flag, " ", path, ": ", parent.string(), " is not a folder");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    RG_THROW(InvalidArgument, flag, " ", path,
             " exists and cannot be overwritten: ", std::strerror(errno));
  const std::string probe = (parent / (".ringgrad-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    RG_THROW(InvalidArgument, flag, " ", path, ": cannot create a file in ", parent.string(), " (",
             std::strerror(errno), "); check its permissions and free space");
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace ringgrad
