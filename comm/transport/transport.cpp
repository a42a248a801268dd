// Transport's default reducing receive: receive into scratch, then reduce.
#include "comm/transport/transport.h"

#include "comm/reduce_ops/reduce_kernels.h"

namespace ringgrad::comm {

void Transport::recv_reduce(int peer, const Reduction& into, size_t bytes) {
  if (landing_.size() < bytes) landing_.resize(bytes);
  post_recv(peer, landing_.data(), bytes);
  wait_recv(peer);
  reduce_into(into.dst, into.local, landing_.data(), bytes / dtype_size(into.dtype), into.dtype,
              into.op);
}

}  // namespace ringgrad::comm
