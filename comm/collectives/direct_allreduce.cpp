// One-round all-reduce for tiny messages: every rank sends its whole buffer to every other rank
// over the full mesh, then adds the n buffers itself, in rank order, so every rank computes
// exactly the same bytes. It moves (n-1) times the buffer per rank, against the tree's
// log2(n) rounds; below kDirectMaxBytes the rounds are what costs. Every collective already
// swaps fingerprints with every peer (CheckedTransport), and the payload leaves in the same
// system call, so the whole all-reduce is that one exchange.
#include <cstring>

#include "comm/collectives/algorithms.h"

namespace ringgrad::comm::collectives {

void direct_allreduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                      ReduceOp op, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) {
    if (output != input && bytes > 0) std::memcpy(output, input, bytes);
    return;
  }
  if (scratch.whole_buffers.size() < n * bytes) scratch.whole_buffers.resize(n * bytes);
  unsigned char* blocks = scratch.whole_buffers.data();  // rank q's buffer at q * bytes
  std::memcpy(blocks + r * bytes, input, bytes);
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    t.post_recv(q, blocks + q * bytes, bytes);
    t.post_send(q, blocks + r * bytes, bytes);
  }
  t.wait_all();
  std::memcpy(output, blocks, bytes);
  for (int q = 1; q < n; ++q) reduce_into(output, output, blocks + q * bytes, count, dtype, op);
  if (op == ReduceOp::avg) divide_by(output, count, dtype, n);
}

}  // namespace ringgrad::comm::collectives
