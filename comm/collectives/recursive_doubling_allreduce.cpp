// Recursive-doubling all-reduce for small messages.
//
// Let p be the largest power of two <= n and e = n - p. First the 2e lowest ranks pair up:
// odd rank 2i+1 hands its buffer to 2i and waits for the answer. The p remaining ranks get
// virtual ranks v (2i -> i, and r -> r - e above 2e) and, for mask = 1, 2, ..., p/2, swap the
// whole buffer with v ^ mask and combine. Both sides of a swap compute a op b in either order,
// which is bitwise commutative, so every rank holds the same bytes; odd ranks get a copy.
//
// Each combining step receives-and-reduces the partner's buffer into a buffer other than the
// one being sent (a pending send still reads it): the partial results alternate between the
// output and scratch, arranged so that the last one lands in the output. Out of place, the
// first step reads the input itself, so no copy of it is made.
#include <cstring>

#include "comm/collectives/algorithms.h"

namespace ringgrad::comm::collectives {

void recursive_doubling_allreduce(Transport& t, const void* input, void* output, size_t count,
                                  DType dtype, ReduceOp op, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) {
    if (output != input && bytes > 0) std::memcpy(output, input, bytes);
    return;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  if (r < 2 * extra && r % 2 == 1) {  // folded into r - 1 for the whole exchange
    t.post_send(r - 1, input, bytes);
    t.post_recv(r - 1, output, bytes);
    return t.wait_all();
  }
  if (scratch.whole_buffers.size() < bytes) scratch.whole_buffers.resize(bytes);
  void* const spare = scratch.whole_buffers.data();
  const int virtual_rank = r < 2 * extra ? r / 2 : r - extra;
  auto real_rank = [&](int v) { return v < extra ? 2 * v : v + extra; };
  int folds = 0;  // combining steps: the partner's fold, then one per mask
  for (int mask = 1; mask < p; mask <<= 1) ++folds;
  if (r < 2 * extra) ++folds;

  const void* partial = input;  // the running result
  // The k-th combining step (from 0) writes the output when as many steps as are left after it
  // are even, so the last writes it; unless that is the buffer a pending send reads (in place).
  auto destination = [&](int k, bool sending) {
    void* d = (folds - 1 - k) % 2 == 0 ? output : spare;
    if (sending && d == partial) d = d == output ? spare : output;
    return d;
  };
  int k = 0;
  if (r < 2 * extra) {
    void* into = destination(k++, false);
    t.recv_reduce(r + 1, Reduction{into, partial, dtype, op}, bytes);
    partial = into;
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    const int partner = real_rank(virtual_rank ^ mask);
    void* into = destination(k++, true);
    t.post_send(partner, partial, bytes);  // send my buffer, receive-and-reduce the partner's
    t.recv_reduce(partner, Reduction{into, partial, dtype, op}, bytes);
    t.wait_all();
    partial = into;
  }
  if (partial != output) std::memcpy(output, partial, bytes);
  if (op == ReduceOp::avg) divide_by(output, count, dtype, n);
  if (r < 2 * extra) {
    t.post_send(r + 1, output, bytes);
    t.wait_all();
  }
}

}  // namespace ringgrad::comm::collectives
