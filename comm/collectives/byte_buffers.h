// Byte arithmetic on the untyped buffers the collectives take (void*, sizes in bytes), shared
// by the ring collectives and the direct exchanges.
#pragma once
#include <cstddef>
#include <cstring>

namespace ringgrad::comm::collectives {

// `offset` bytes into `base`, writable: an input buffer is const to the caller but may be the
// output too (in place), and the transport takes plain pointers.
inline char* bytes_at(const void* base, size_t offset) {
  return static_cast<char*>(const_cast<void*>(base)) + offset;
}

// Copies unless there is nothing to copy or the two are one buffer (in place).
inline void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

}  // namespace ringgrad::comm::collectives
