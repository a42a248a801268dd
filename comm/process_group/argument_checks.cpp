#include "comm/process_group/argument_checks.h"

#include "core/error.h"

namespace ringgrad::comm {

void check_rank(int r, int size, const char* operation, const char* role) {
  if (r < 0 || r >= size)
    RG_THROW(InvalidArgument, operation, ": ", role, " ", r, " is outside the group of size ",
             size);
}

void check_peer(int peer, int rank, int size, bool sending) {
  const char* operation = sending ? "send" : "recv";
  check_rank(peer, size, operation, sending ? "destination" : "source");
  if (peer == rank)
    RG_THROW(InvalidArgument, operation, ": rank ", rank, " cannot ",
             sending ? "send to" : "receive from", " itself");
}

}  // namespace ringgrad::comm
