#include "core/hostname.h"

#include <unistd.h>

#include <climits>

namespace ringgrad {

std::string hostname() {
  // HOST_NAME_MAX excludes the terminator; a name cut at the buffer's end may lack one.
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace ringgrad
