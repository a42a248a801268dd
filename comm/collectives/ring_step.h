// The pieces every ring collective is built from: the chunk layout, and one step of a ring
// pass with its segment pipelining (docs/ring-allreduce.md, "Pipelining").
#pragma once
#include <algorithm>
#include <cstddef>

#include "comm/collectives/algorithms.h"

namespace ringgrad::comm::collectives {

// 256 KiB segments: large enough that per-segment system calls are noise, small enough that
// two in flight fit the socket buffers and the reduction of one overlaps the next. A multiple
// of every element size, so a segment never splits an element.
constexpr size_t kSegmentBytes = 256 << 10;

inline int ring_mod(int x, int n) { return ((x % n) + n) % n; }

// `count` elements split into n chunks; the first count % n chunks get one extra element.
struct ChunkLayout {
  size_t count, world;
  size_t size(int c) const { return count / world + (static_cast<size_t>(c) < count % world); }
  size_t offset(int c) const {
    return static_cast<size_t>(c) * (count / world) +
           std::min(static_cast<size_t>(c), count % world);
  }
};

struct Block {
  char* data;  // where the block's bytes land (and are forwarded from)
  size_t bytes;
};

// How a received segment is folded into the block it lands on: block = local (op) received
// (Transport::recv_reduce), then divided by `divisor` (the last reduce step of avg; 1 = no
// division).
struct Fold {
  const char* local;  // this rank's own values, laid out like the block
  DType dtype;
  ReduceOp op;
  int divisor;
};

// One step of a ring pass: receives `into` from `left` in kSegmentBytes segments. With a
// `fold`, each segment is received-and-reduced into `into`; without, it lands there, two
// receives posted at a time. With `forward`, each finished segment is sent on to `right` at
// once: the block a rank finishes at step t is what it sends at step t+1, so that send is on
// the wire while this step's later segments are still arriving. Returns when every segment
// has arrived; sends are left for the caller's wait_all().
void pipelined_step(Transport& t, int left, int right, Block into, const Fold* fold, bool forward);

}  // namespace ringgrad::comm::collectives
