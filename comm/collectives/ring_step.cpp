// One pipelined ring step (ring_step.h).
#include "comm/collectives/ring_step.h"

namespace ringgrad::comm::collectives {

void pipelined_step(Transport& t, int left, int right, Block into, const Fold* fold, bool forward,
                    Scratch::Buffer& slots) {
  constexpr size_t segment = kSegmentBytes;
  if (fold && slots.size() < 2 * segment) slots.resize(2 * segment);
  const size_t segments = (into.bytes + segment - 1) / segment;
  auto length = [&](size_t j) { return std::min(segment, into.bytes - j * segment); };
  auto landing = [&](size_t j) -> void* {
    return fold ? static_cast<void*>(slots.data() + (j % 2) * segment) : into.data + j * segment;
  };
  if (segments > 0) t.post_recv(left, landing(0), length(0));
  for (size_t j = 0; j < segments; ++j) {
    if (j + 1 < segments) t.post_recv(left, landing(j + 1), length(j + 1));
    t.wait_recv(left);
    char* finished = into.data + j * segment;
    if (fold) {
      const size_t elems = length(j) / dtype_size(fold->dtype);
      reduce_into(finished, fold->local + j * segment, landing(j), elems, fold->dtype, fold->op);
      if (fold->divisor > 1) divide_by(finished, elems, fold->dtype, fold->divisor);
    }
    if (forward) t.post_send(right, finished, length(j));
  }
}

}  // namespace ringgrad::comm::collectives
