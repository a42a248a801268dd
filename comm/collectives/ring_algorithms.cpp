// The ring collectives, each written as the schedule in docs/ring-allreduce.md: phase loops
// over steps, where at step t rank r of n sends one chunk to its right neighbour r+1 and
// receives one from its left neighbour r-1. All-reduce is a reduce-scatter phase then an
// all-gather phase; reduce, reduce-scatter and all-gather reuse the phases. The segment
// pipelining inside a step is in pipelined_step (ring_step.h).
#include "comm/collectives/algorithms.h"
#include "comm/collectives/byte_buffers.h"
#include "comm/collectives/ring_step.h"

namespace ringgrad::comm::collectives {

namespace {

struct Ring {
  int n, rank, right, left;
  explicit Ring(const Transport& t)
      : n(t.size()),
        rank(t.rank()),
        right(ring_mod(t.rank() + 1, t.size())),
        left(ring_mod(t.rank() - 1, t.size())) {}
};

// Chunk c of a buffer of `count` elements of `elem` bytes, split as ChunkLayout says.
Block chunk_of(const void* base, const ChunkLayout& chunks, size_t elem, int c) {
  return Block{bytes_at(base, chunks.offset(c) * elem), chunks.size(c) * elem};
}

// Phase 1 of the all-reduce, steps 0..n-2: rank r sends chunk (r - t) mod n and receives chunk
// (r - t - 1) mod n, folding in its own values of that chunk. The chunk received at step t is
// the one sent at step t+1, so each step forwards what it finishes (pipelined_step). After the
// phase rank r holds chunk (r + 1) mod n fully reduced (divided by n for avg); it is sent on
// only when `forward_finished` (the all-gather follows).
void reduce_scatter_phase(Transport& t, const Ring& ring, const void* input, void* output,
                          const ChunkLayout& chunks, DType dtype, ReduceOp op,
                          bool forward_finished) {
  const size_t elem = dtype_size(dtype);
  const Block own = chunk_of(input, chunks, elem, ring.rank);  // step 0 sends chunk r as is
  t.post_send(ring.right, own.data, own.bytes);
  for (int step = 0; step < ring.n - 1; ++step) {
    const int recv_chunk = ring_mod(ring.rank - step - 1, ring.n);
    const bool last = step == ring.n - 2;
    const Fold fold{chunk_of(input, chunks, elem, recv_chunk).data, dtype, op,
                    last && op == ReduceOp::avg ? ring.n : 1};
    pipelined_step(t, ring.left, ring.right, chunk_of(output, chunks, elem, recv_chunk), &fold,
                   !last || forward_finished);
  }
}

}  // namespace

void ring_allreduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                    ReduceOp op, Scratch& /*the ring needs none: it folds as it receives*/) {
  const Ring ring(t);
  const size_t elem = dtype_size(dtype);
  if (ring.n == 1) return copy_if_distinct(output, input, count * elem);
  const ChunkLayout chunks{count, static_cast<size_t>(ring.n)};
  reduce_scatter_phase(t, ring, input, output, chunks, dtype, op, true);
  // Phase 2, all-gather, steps n-1..2n-3 (s = t - (n-1) below): rank r receives the finished
  // chunk (r - s) mod n and forwards it, except at the last step. Bytes are stored, never
  // recomputed, so every rank ends bitwise identical.
  for (int s = 0; s < ring.n - 1; ++s) {
    const int recv_chunk = ring_mod(ring.rank - s, ring.n);
    pipelined_step(t, ring.left, ring.right, chunk_of(output, chunks, elem, recv_chunk), nullptr,
                   s < ring.n - 2);
  }
  t.wait_all();
}

// The reduce-scatter phase of the all-reduce, then every rank sends its finished chunk to the
// root.
void ring_reduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                 ReduceOp op, int root) {
  const Ring ring(t);
  const size_t elem = dtype_size(dtype);
  if (ring.n == 1) return copy_if_distinct(output, input, count * elem);
  const ChunkLayout chunks{count, static_cast<size_t>(ring.n)};
  reduce_scatter_phase(t, ring, input, output, chunks, dtype, op, false);
  t.wait_all();
  auto finished_by = [&](int owner) {
    return chunk_of(output, chunks, elem, ring_mod(owner + 1, ring.n));
  };
  if (ring.rank == root) {
    for (int peer = 0; peer < ring.n; ++peer)
      if (peer != root) t.post_recv(peer, finished_by(peer).data, finished_by(peer).bytes);
  } else {
    t.post_send(root, finished_by(ring.rank).data, finished_by(ring.rank).bytes);
  }
  t.wait_all();
}

// The reduce-scatter collective: input holds n blocks of `count` elements and block r of the
// result must end on rank r, so the schedule is shifted by one against the all-reduce's: step t
// sends block (r - t - 1) mod n and receives block (r - t - 2) mod n, and the last step
// (t = n-2) receives block r. Partial sums live in `work`: the input itself when in place,
// else a scratch copy of the layout; the last step folds straight into the output.
void ring_reduce_scatter(Transport& t, const void* input, void* output, size_t count, DType dtype,
                         ReduceOp op, Scratch& scratch) {
  const Ring ring(t);
  const size_t elem = dtype_size(dtype), block = count * elem;
  if (ring.n == 1) return copy_if_distinct(output, input, block);
  const bool in_place = output == bytes_at(input, ring.rank * block);
  Scratch::Buffer& partials = scratch.partials;
  if (!in_place && partials.size() < ring.n * block) partials.resize(ring.n * block);
  void* work = in_place ? const_cast<void*>(input) : static_cast<void*>(partials.data());
  const int first_send_block = ring_mod(ring.rank - 1, ring.n);
  t.post_send(ring.right, bytes_at(input, first_send_block * block), block);
  for (int step = 0; step < ring.n - 1; ++step) {
    const int recv_block = ring_mod(ring.rank - step - 2, ring.n);
    const bool last = step == ring.n - 2;
    const Fold fold{bytes_at(input, recv_block * block), dtype, op,
                    last && op == ReduceOp::avg ? ring.n : 1};
    const Block into{last ? static_cast<char*>(output) : bytes_at(work, recv_block * block), block};
    pipelined_step(t, ring.left, ring.right, into, &fold, !last);
  }
  t.wait_all();
}

// All-gather: rank r's block starts in place at r * bytes of the output; step t sends block
// (r - t) mod n and receives block (r - t - 1) mod n straight into the output.
void ring_allgather(Transport& t, const void* input, void* output, size_t bytes) {
  const Ring ring(t);
  copy_if_distinct(bytes_at(output, ring.rank * bytes), input, bytes);
  if (ring.n == 1) return;
  t.post_send(ring.right, bytes_at(output, ring.rank * bytes), bytes);
  for (int step = 0; step < ring.n - 1; ++step) {
    const int recv_block = ring_mod(ring.rank - step - 1, ring.n);
    pipelined_step(t, ring.left, ring.right, Block{bytes_at(output, recv_block * bytes), bytes},
                   nullptr, step < ring.n - 2);
  }
  t.wait_all();
}

// A chain, not a closed ring: position p = (r - root) mod n receives from p-1 and forwards to
// p+1, except the last position, which only receives.
void ring_broadcast(Transport& t, const void* input, void* output, size_t bytes, int root) {
  const int n = t.size(), r = t.rank();
  const int position = ring_mod(r - root, n);
  if (position == 0) copy_if_distinct(output, input, bytes);
  if (n == 1 || bytes == 0) return;
  const int right = ring_mod(r + 1, n), left = ring_mod(r - 1, n);
  if (position == 0) {
    t.post_send(right, output, bytes);
    return t.wait_all();
  }
  const size_t segment = kSegmentBytes, segments = (bytes + segment - 1) / segment;
  for (size_t j = 0; j < segments; ++j) {
    const size_t off = j * segment, len = std::min(segment, bytes - off);
    t.post_recv(left, bytes_at(output, off), len);
  }
  for (size_t j = 0; j < segments; ++j) {
    t.wait_recv(left);
    const size_t off = j * segment, len = std::min(segment, bytes - off);
    if (position + 1 < n) t.post_send(right, bytes_at(output, off), len);
  }
  t.wait_all();
}

}  // namespace ringgrad::comm::collectives
