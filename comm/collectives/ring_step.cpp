// One pipelined ring step (ring_step.h).
#include "comm/collectives/ring_step.h"

namespace ringgrad::comm::collectives {

void pipelined_step(Transport& t, int left, int right, Block into, const Fold* fold, bool forward) {
  constexpr size_t segment = kSegmentBytes;
  const size_t segments = (into.bytes + segment - 1) / segment;
  auto length = [&](size_t j) { return std::min(segment, into.bytes - j * segment); };
  if (!fold && segments > 0) t.post_recv(left, into.data, length(0));
  for (size_t j = 0; j < segments; ++j) {
    char* finished = into.data + j * segment;
    if (fold) {
      t.recv_reduce(left, Reduction{finished, fold->local + j * segment, fold->dtype, fold->op},
                    length(j));
      const size_t elems = length(j) / dtype_size(fold->dtype);
      if (fold->divisor > 1) divide_by(finished, elems, fold->dtype, fold->divisor);
    } else {
      if (j + 1 < segments) t.post_recv(left, finished + segment, length(j + 1));
      t.wait_recv(left);
    }
    if (forward) t.post_send(right, finished, length(j));
  }
}

}  // namespace ringgrad::comm::collectives
