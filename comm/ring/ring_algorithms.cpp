// Ring collectives as instances of ring_pass (comm/ring/ring_pass.h).
//
// All-reduce, rank r of n, chunks c = 0..n-1: at step t (0 <= t < 2n-2) rank r sends chunk
// (r - t) mod n to r+1 and receives chunk (r - t - 1) mod n from r-1. For t < n-1 the received
// partial sum is combined with the local contribution (reduce-scatter); after n-1 steps rank r
// holds the finished chunk (r + 1) mod n. For t >= n-1 finished chunks are stored as they
// arrive (all-gather). Chunk (r+1) is divided by n there for avg, so every rank gets its bytes.
#include "comm/ring/ring_algorithms.h"

#include <cstring>

#include "comm/ring/ring_pass.h"
#include "core/error.h"

namespace ringgrad::comm::ring {

namespace {

char* bytes_at(const void* base, size_t offset) {
  return static_cast<char*>(const_cast<void*>(base)) + offset;
}

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

// The reduce-scatter half of the all-reduce (steps 0..n-2): on return this rank's `output`
// holds the finished chunk (rank + 1) mod n, and `gather_steps` more steps of the same pass
// circulate finished chunks (n-1 for all-reduce, 0 for reduce).
void allreduce_pass(Transport& t, const void* input, void* output, size_t count, DType dtype,
                    ReduceOp op, int gather_steps, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t elem = dtype_size(dtype);
  const ChunkLayout chunks{count, static_cast<size_t>(n)};
  auto chunk_block = [&](int c, const void* base) {
    return Block{bytes_at(base, chunks.offset(c) * elem), chunks.size(c) * elem};
  };
  auto block_of = [&](int step) { return chunk_block(ring_mod(r - step - 1, n), output); };
  auto reduces = [&](int step) { return step < n - 1; };
  auto combine = [&](int step, size_t off, size_t len, const unsigned char* received) {
    const int c = ring_mod(r - step - 1, n);
    const size_t at = chunks.offset(c) * elem + off;
    reduce_into(bytes_at(output, at), bytes_at(input, at), received, len / elem, dtype, op);
    if (op == ReduceOp::avg && step == n - 2) divide_by(bytes_at(output, at), len / elem, dtype, n);
  };
  ring_pass(t, chunk_block(r, input), n - 1 + gather_steps, block_of, reduces, combine,
            scratch.segments, elem);
}

}  // namespace

void ring_allreduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                    ReduceOp op, Scratch& scratch) {
  if (t.size() == 1) return copy_if_distinct(output, input, count * dtype_size(dtype));
  allreduce_pass(t, input, output, count, dtype, op, t.size() - 1, scratch);
}

// Reduce-scatter as in the all-reduce, then each rank sends its finished chunk to the root.
void ring_reduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                 ReduceOp op, int root, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t elem = dtype_size(dtype);
  if (n == 1) return copy_if_distinct(output, input, count * elem);
  allreduce_pass(t, input, output, count, dtype, op, 0, scratch);
  const ChunkLayout chunks{count, static_cast<size_t>(n)};
  auto finished = [&](int owner) {
    const int c = ring_mod(owner + 1, n);
    return Block{bytes_at(output, chunks.offset(c) * elem), chunks.size(c) * elem};
  };
  if (r == root) {
    for (int peer = 0; peer < n; ++peer)
      if (peer != root) t.post_recv(peer, finished(peer).data, finished(peer).bytes);
  } else {
    t.post_send(root, finished(r).data, finished(r).bytes);
  }
  t.wait_all();
}

// Chunk r of the result ends on rank r: step t sends chunk (r - t - 1), receives (r - t - 2).
// Partial sums live in `work`: the input itself in place, else a scratch copy of the layout.
void ring_reduce_scatter(Transport& t, const void* input, void* output, size_t count, DType dtype,
                         ReduceOp op, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t elem = dtype_size(dtype), block = count * elem;
  if (n == 1) return copy_if_distinct(output, input, block);
  const bool in_place = output == bytes_at(input, r * block);
  Scratch::Buffer& partials = scratch.partials;
  if (!in_place && partials.size() < n * block) partials.resize(n * block);
  void* work = in_place ? const_cast<void*>(input) : static_cast<void*>(partials.data());
  auto dest = [&](int step, int c) { return step == n - 2 ? output : bytes_at(work, c * block); };
  auto block_of = [&](int step) { return Block{static_cast<char*>(dest(step, ring_mod(r - step - 2, n))), block}; };
  auto reduces = [](int) { return true; };
  auto combine = [&](int step, size_t off, size_t len, const unsigned char* received) {
    const int c = ring_mod(r - step - 2, n);
    char* dst = static_cast<char*>(dest(step, c)) + off;
    reduce_into(dst, bytes_at(input, c * block + off), received, len / elem, dtype, op);
    if (op == ReduceOp::avg && step == n - 2) divide_by(dst, len / elem, dtype, n);
  };
  ring_pass(t, Block{bytes_at(input, ring_mod(r - 1, n) * block), block}, n - 1, block_of,
            reduces, combine, scratch.segments, elem);
}

// Step t sends block (r - t) and receives block (r - t - 1) straight into the output.
void ring_allgather(Transport& t, const void* input, void* output, size_t bytes, Scratch& scratch) {
  const int n = t.size(), r = t.rank();
  copy_if_distinct(bytes_at(output, r * bytes), input, bytes);
  auto block_of = [&](int step) { return Block{bytes_at(output, ring_mod(r - step - 1, n) * bytes), bytes}; };
  auto no_reduce = [](int) { return false; };
  auto no_combine = [](int, size_t, size_t, const unsigned char*) {};
  ring_pass(t, Block{bytes_at(output, r * bytes), bytes}, n - 1, block_of, no_reduce, no_combine,
            scratch.segments, 1);
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

AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int world, const std::string& forced) {
  if (forced == "ring") return AllreduceAlgorithm::ring;
  if (forced == "tree") return AllreduceAlgorithm::tree;
  if (forced == "direct") return AllreduceAlgorithm::direct;
  RG_CHECK(forced.empty(), "RINGGRAD_ALGO='", forced, "' is not one of: ring, tree, direct");
  if (bytes <= kDirectMaxBytes || world <= 1) return AllreduceAlgorithm::direct;
  return bytes <= kTreeMaxBytes ? AllreduceAlgorithm::tree : AllreduceAlgorithm::ring;
}

AllreduceFn allreduce_function(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::tree: return &tree_allreduce;
    case AllreduceAlgorithm::direct: return &direct_allreduce;
    case AllreduceAlgorithm::ring: break;
  }
  return &ring_allreduce;
}

}  // namespace ringgrad::comm::ring
