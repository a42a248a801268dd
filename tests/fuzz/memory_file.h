// The fuzz input as a file the readers under test open by path: an in-memory file (memfd),
// named /proc/self/fd/N, closed when the object goes.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ringgrad::fuzz {

class MemoryFile {
 public:
  MemoryFile(const uint8_t* bytes, size_t size) : fd_(::memfd_create("fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();  // no input file: nothing would be tested
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, bytes + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace ringgrad::fuzz
