// ShmSegment: memory shared between the ranks of one host, as an anonymous memfd mapped into
// each. It has no name, so nothing appears in /dev/shm and nothing is left behind when a rank
// is killed: the kernel frees it when the last mapping and descriptor go. The creator passes
// the descriptor to its peers over their unix socket (socket.h: write_with_fds).
#pragma once
#include <cstddef>
#include <string>
#include <utility>

#include "core/unique_fd.h"

namespace ringgrad::comm::shm {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // A new zero-filled segment of `bytes` with every page reserved up front, so that a shortage
  // of memory fails here with IoError (saying what was needed and what is available) instead of
  // as a SIGBUS in the middle of a collective. `name` shows in /proc/<pid>/maps.
  static ShmSegment create(size_t bytes, const std::string& name);
  // Maps the segment behind `fd` (received from its creator), expected to hold `bytes`; throws
  // IoError when it is smaller.
  static ShmSegment map(const UniqueFd& fd, size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const UniqueFd& fd() const { return fd_; }  // valid for a created segment, until close_fd()
  void close_fd() { fd_.reset(); }            // the mapping stays

 private:
  UniqueFd fd_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ringgrad::comm::shm
