// The collectives where each rank's data has one destination, so nothing is reduced or
// forwarded: gather (all to the root), scatter (the root to all) and all-to-all (every rank to
// every rank). Each is one round of direct sends and receives over the full mesh, as Gloo and
// MPI's linear algorithms do: a ring would forward every block through n/2 ranks on average.
// Written against Transport only (comm/collectives/algorithms.h's contract); buffers are host
// memory and sizes are bytes.
#pragma once
#include <cstddef>
#include <vector>

#include "comm/transport/transport.h"

namespace ringgrad::comm::collectives {

// Every rank's `bytes` of `input` land on `root` at output + rank * bytes; `output` is read
// only on the root (n * bytes there). In place on the root when input == output + root * bytes.
void linear_gather(Transport& t, const void* input, void* output, size_t bytes, int root);

// Block r of the root's `input` (n * bytes, read only on the root) lands in rank r's `output`.
void linear_scatter(Transport& t, const void* input, void* output, size_t bytes, int root);

// One rank's side of an all-to-all: block p of `input` (send[p] bytes from offset send_at[p])
// goes to rank p, and rank p's block for this rank lands at output + recv_at[p] (recv[p]
// bytes). Each pair first swaps what it is about to send and expects, so sizes that disagree
// fail on both ranks of the pair with both numbers, before any payload moves. The caller's
// buffers must not overlap (out of place).
struct AlltoallLayout {
  std::vector<size_t> send, send_at, recv, recv_at;  // bytes, indexed by rank
};
void pairwise_alltoall(Transport& t, const void* input, void* output, const AlltoallLayout& layout);

// The layout of `count`-element blocks of `elem` bytes, or of uneven split sizes (elements per
// rank; empty means equal blocks of count / n). Throws InvalidArgument for splits that do not
// have one entry per rank or do not add up to `count`.
std::vector<size_t> split_bytes(const std::vector<int64_t>& splits, size_t count, size_t elem,
                                int n, const char* operation, const char* role);
std::vector<size_t> offsets_of(const std::vector<size_t>& sizes);

}  // namespace ringgrad::comm::collectives
