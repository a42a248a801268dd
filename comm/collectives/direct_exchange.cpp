// Gather, scatter and all-to-all: one round of direct sends and receives (direct_exchange.h).
#include "comm/collectives/direct_exchange.h"

#include <cstdint>

#include "comm/collectives/byte_buffers.h"
#include "core/error.h"

namespace ringgrad::comm::collectives {

void linear_gather(Transport& t, const void* input, void* output, size_t bytes, int root) {
  const int n = t.size(), r = t.rank();
  if (r != root) {
    if (bytes > 0) t.post_send(root, input, bytes);
    return t.wait_all();
  }
  copy_if_distinct(bytes_at(output, r * bytes), input, bytes);
  for (int q = 0; q < n; ++q)
    if (q != r && bytes > 0) t.post_recv(q, bytes_at(output, q * bytes), bytes);
  t.wait_all();
}

void linear_scatter(Transport& t, const void* input, void* output, size_t bytes, int root) {
  const int n = t.size(), r = t.rank();
  if (r != root) {
    if (bytes > 0) t.post_recv(root, output, bytes);
    return t.wait_all();
  }
  // Sends start with the root's right neighbour, so with several roots at once (subgroups)
  // the first blocks do not all go to rank 0.
  for (int step = 1; step < n; ++step) {
    const int q = (r + step) % n;
    if (bytes > 0) t.post_send(q, bytes_at(input, q * bytes), bytes);
  }
  copy_if_distinct(output, bytes_at(input, r * bytes), bytes);
  t.wait_all();
}

// Step 1 swaps, with every peer p, the pair (bytes this rank sends p, bytes it expects from p);
// step 2 posts every receive, then the sends in the order r+1, r+2, ... (so at step s rank r
// sends to r+s while r-s sends to it: no peer is the target of every rank at once), and waits.
void pairwise_alltoall(Transport& t, const void* input, void* output, const AlltoallLayout& l) {
  const int n = t.size(), r = t.rank();
  std::vector<uint64_t> mine(2 * n), theirs(2 * n);  // [2p]: sends to p, [2p+1]: expects from p
  for (int p = 0; p < n; ++p) {
    mine[2 * p] = l.send[p];
    mine[2 * p + 1] = l.recv[p];
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    t.post_recv(p, &theirs[2 * p], 2 * sizeof(uint64_t));
    t.post_send(p, &mine[2 * p], 2 * sizeof(uint64_t));
  }
  t.wait_all();
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    // theirs[2p]: what p sends here; theirs[2p+1]: what p expects from here.
    if (theirs[2 * p] != l.recv[p] || theirs[2 * p + 1] != l.send[p])
      RG_THROW(InvalidArgument, "alltoall: rank ", r, " sends ", l.send[p], " bytes to rank ", p,
               " and expects ", l.recv[p], " from it, but rank ", p, " sends ", theirs[2 * p],
               " and expects ", theirs[2 * p + 1], " (the split sizes of the two ranks disagree)");
  }
  if (l.recv[r] != l.send[r])
    RG_THROW(InvalidArgument, "alltoall: rank ", r, " sends itself ", l.send[r],
             " bytes but expects ", l.recv[r]);
  for (int p = 0; p < n; ++p)
    if (p != r && l.recv[p] > 0) t.post_recv(p, bytes_at(output, l.recv_at[p]), l.recv[p]);
  for (int step = 1; step < n; ++step) {
    const int p = (r + step) % n;
    if (l.send[p] > 0) t.post_send(p, bytes_at(input, l.send_at[p]), l.send[p]);
  }
  copy_if_distinct(bytes_at(output, l.recv_at[r]), bytes_at(input, l.send_at[r]), l.send[r]);
  t.wait_all();
}

std::vector<size_t> split_bytes(const std::vector<int64_t>& splits, size_t count, size_t elem,
                                int n, const char* operation, const char* role) {
  std::vector<size_t> bytes(static_cast<size_t>(n));
  if (splits.empty()) {
    if (count % n != 0)
      RG_THROW(InvalidArgument, operation, ": the ", role, " has ", count,
               " elements, which do not split evenly over ", n, " ranks (pass split sizes)");
    for (auto& b : bytes) b = count / n * elem;
    return bytes;
  }
  if (splits.size() != bytes.size())
    RG_THROW(InvalidArgument, operation, ": ", splits.size(), " ", role, " split sizes for ", n,
             " ranks");
  size_t total = 0;
  for (int p = 0; p < n; ++p) {
    if (splits[p] < 0)
      RG_THROW(InvalidArgument, operation, ": ", role, " split size ", splits[p], " for rank ", p,
               " is negative");
    bytes[p] = static_cast<size_t>(splits[p]) * elem;
    total += static_cast<size_t>(splits[p]);
  }
  if (total != count)
    RG_THROW(InvalidArgument, operation, ": the ", role, " split sizes add up to ", total,
             " elements but the ", role, " has ", count);
  return bytes;
}

std::vector<size_t> offsets_of(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets(sizes.size());
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = at;
    at += sizes[i];
  }
  return offsets;
}

}  // namespace ringgrad::comm::collectives
