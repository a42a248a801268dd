// Recursive-doubling all-reduce for small messages.
//
// Let p be the largest power of two <= n and e = n - p. First the 2e lowest ranks pair up:
// odd rank 2i+1 hands its buffer to 2i and waits for the answer. The p remaining ranks get
// virtual ranks v (2i -> i, and r -> r - e above 2e) and, for mask = 1, 2, ..., p/2, swap the
// whole buffer with v ^ mask and combine. Both sides of a swap compute a op b in either order,
// which is bitwise commutative, so every rank holds the same bytes; odd ranks get a copy.
#include <cstring>

#include "comm/collectives/algorithms.h"

namespace ringgrad::comm::collectives {

void recursive_doubling_allreduce(Transport& t, const void* input, void* output, size_t count,
                                  DType dtype, ReduceOp op, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t bytes = count * dtype_size(dtype);
  if (output != input && bytes > 0) std::memcpy(output, input, bytes);
  if (n == 1 || bytes == 0) return;
  if (scratch.segments.size() < bytes) scratch.segments.resize(bytes);
  void* received = scratch.segments.data();

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  if (r < 2 * extra && r % 2 == 1) {  // folded into r - 1 for the whole exchange
    t.post_send(r - 1, output, bytes);
    t.post_recv(r - 1, output, bytes);
    return t.wait_all();
  }
  if (r < 2 * extra) {
    t.post_recv(r + 1, received, bytes);
    t.wait_recv(r + 1);
    reduce_into(output, output, received, count, dtype, op);
  }
  const int virtual_rank = r < 2 * extra ? r / 2 : r - extra;
  auto real_rank = [&](int v) { return v < extra ? 2 * v : v + extra; };
  for (int mask = 1; mask < p; mask <<= 1) {
    const int partner = real_rank(virtual_rank ^ mask);
    t.sendrecv(partner, output, bytes, partner, received, bytes);
    reduce_into(output, output, received, count, dtype, op);
  }
  if (op == ReduceOp::avg) divide_by(output, count, dtype, n);
  if (r < 2 * extra) {
    t.post_send(r + 1, output, bytes);
    t.wait_all();
  }
}

}  // namespace ringgrad::comm::collectives
