// The pipelined ring pass every ring collective is built from, plus the chunk layout.
// A pass has `steps` steps; at step t a rank receives one block from its left neighbour and
// forwards the block it finished at step t-1 to its right neighbour. Blocks move in segments,
// so segment j of step t+1 is on the wire while segment j+1 of step t is still being reduced.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "comm/transport/transport.h"

namespace ringgrad::comm::ring {

// 256 KiB segments: large enough that per-segment system calls are noise, small enough that
// two in flight fit the socket buffers and the reduction of one overlaps the next.
constexpr size_t kSegmentBytes = 256 << 10;

inline int ring_mod(int x, int n) { return ((x % n) + n) % n; }

// `count` elements split into n chunks; the first count % n chunks get one extra element.
struct ChunkLayout {
  size_t count, world;
  size_t size(int c) const { return count / world + (static_cast<size_t>(c) < count % world); }
  size_t offset(int c) const {
    return static_cast<size_t>(c) * (count / world) + std::min(static_cast<size_t>(c), count % world);
  }
};

struct Block {
  char* data;    // where the block's bytes land (and are forwarded from)
  size_t bytes;
};

// Runs one ring pass. `first_send` is what goes right at step 0. block_of(t) is the block
// received at step t; for steps where reduces(t) holds the segment lands in `scratch` and
// combine(t, segment_offset, segment_bytes, received) folds it into the block. From step 1
// on, a rank sends exactly what it received (and combined) at the previous step.
template <class BlockOf, class Reduces, class Combine>
void ring_pass(Transport& t, Block first_send, int steps, BlockOf block_of, Reduces reduces,
               Combine combine, std::vector<unsigned char>& scratch, size_t elem_bytes) {
  const int n = t.size();
  const int right = ring_mod(t.rank() + 1, n), left = ring_mod(t.rank() - 1, n);
  const size_t segment = std::max(elem_bytes, kSegmentBytes / elem_bytes * elem_bytes);
  if (scratch.size() < 2 * segment) scratch.resize(2 * segment);
  unsigned char* slot[2] = {scratch.data(), scratch.data() + segment};
  if (steps > 0) t.post_send(right, first_send.data, first_send.bytes);
  for (int step = 0; step < steps; ++step) {
    const Block block = block_of(step);
    const bool reduce = reduces(step);
    const size_t segments = (block.bytes + segment - 1) / segment;
    auto post = [&](size_t j) {
      const size_t off = j * segment, len = std::min(segment, block.bytes - off);
      t.post_recv(left, reduce ? static_cast<void*>(slot[j % 2]) : block.data + off, len);
    };
    if (segments > 0) post(0);
    for (size_t j = 0; j < segments; ++j) {
      if (j + 1 < segments) post(j + 1);
      t.wait_recv(left);
      const size_t off = j * segment, len = std::min(segment, block.bytes - off);
      if (reduce) combine(step, off, len, slot[j % 2]);
      if (step + 1 < steps) t.post_send(right, block.data + off, len);
    }
  }
  t.wait_all();
}

}  // namespace ringgrad::comm::ring
