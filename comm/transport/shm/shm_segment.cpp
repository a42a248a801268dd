// ShmSegment: memfd_create + ftruncate + fallocate + mmap(MAP_SHARED). fallocate makes the
// kernel take the pages now: a segment that does not fit (a memory cgroup limit, a file size
// limit) fails at set-up, where the transport can still fall back to unix sockets. Every mapping
// is populated (MAP_POPULATE) at set-up too: otherwise the first pass through a 1 MiB ring
// takes 256 page faults in each of the two processes, which made the first all-reduces of a
// run several times slower than the rest (docs/measurements.md).
#include "comm/transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/host_memory.h"

namespace ringgrad::comm::shm {

namespace {

// What the kernel would still give: MemAvailable, and a file size limit when one is set.
std::string available_memory() {
  const auto available = mem_available_bytes();
  std::string out = available ? "MemAvailable " + format_bytes(static_cast<double>(*available))
                              : std::string("MemAvailable unknown");
  if (const auto limit = file_size_limit())
    out += ", file size limit (ulimit -f) " + format_bytes(static_cast<double>(*limit));
  return out;
}

}  // namespace

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, bytes_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_) ::munmap(data_, bytes_);
}

ShmSegment ShmSegment::create(size_t bytes, const std::string& name) {
  ShmSegment s;
  s.fd_ = UniqueFd(::memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!s.fd_.valid()) RG_THROW(IoError, "memfd_create failed: ", std::strerror(errno));
  // Past the file size limit ftruncate would not merely fail: the kernel sends SIGXFSZ, whose
  // default action ends the process (every rank of a job under `ulimit -f`).
  if (const auto limit = file_size_limit(); limit && *limit < bytes)
    RG_THROW(IoError, "cannot reserve ", format_bytes(static_cast<double>(bytes)),
             " of shared memory: the file size limit (ulimit -f) is ",
             format_bytes(static_cast<double>(*limit)));
  const auto size = static_cast<off_t>(bytes);
  const char* step = "ftruncate";
  int rc = ::ftruncate(s.fd_.get(), size);
  if (rc == 0) step = "fallocate", rc = ::fallocate(s.fd_.get(), 0, 0, size);
  if (rc != 0) {
    const int err = errno;
    RG_THROW(IoError, "cannot reserve ", format_bytes(static_cast<double>(bytes)),
             " of shared memory (", step, ": ", std::strerror(err),
             "; available: ", available_memory(), ")");
  }
  s.data_ =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s.fd_.get(), 0);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    RG_THROW(IoError, "mmap of ", format_bytes(static_cast<double>(bytes)),
             " of shared memory failed: ", std::strerror(errno));
  }
  s.bytes_ = bytes;
  return s;
}

ShmSegment ShmSegment::map(const UniqueFd& fd, size_t bytes) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < bytes)
    RG_THROW(IoError, "the shared segment a peer passed holds ", st.st_size, " bytes, expected ",
             bytes);
  ShmSegment s;
  s.data_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    RG_THROW(IoError, "mmap of a peer's shared segment failed: ", std::strerror(errno));
  }
  s.bytes_ = bytes;
  return s;
}

}  // namespace ringgrad::comm::shm
