// The staged collectives: a chunk plan and a per-slot host collective for each. A slot holds
// one chunk laid out as the in-place host algorithm wants it (a rank's block of an allgather
// at rank * chunk size, a reduce-scatter's blocks packed back to back).
#include "comm/collectives/staged_collectives.h"

#include <algorithm>

namespace ringgrad::comm::collectives {

size_t chunk_elems_for(size_t chunk_bytes, size_t elem) {
  return std::max<size_t>(1, chunk_bytes / elem);
}

size_t chunks_for(size_t count, size_t chunk_elems) {
  return std::max<size_t>(1, (count + chunk_elems - 1) / chunk_elems);
}

ChunkRange chunk_range(size_t count, size_t chunk_elems, size_t chunk) {
  const size_t begin = std::min(count, chunk * chunk_elems);
  return {begin, std::min(chunk_elems, count - begin)};
}

StagedChunk elementwise_chunk(size_t count, size_t elem, size_t chunk_elems, size_t chunk,
                              bool copy_in, bool copy_out) {
  const ChunkRange r = chunk_range(count, chunk_elems, chunk);
  StagedBlock block;
  block.device_offset = r.begin * elem;
  block.width = r.size * elem;
  block.rows = 1;
  StagedChunk c;
  if (copy_in) c.in = block;
  if (copy_out) c.out = block;
  return c;
}

StagedChunk allgather_chunk(size_t bytes, int world, int rank, size_t chunk_bytes, size_t chunk) {
  const ChunkRange r = chunk_range(bytes, chunk_bytes, chunk);
  StagedChunk c;
  c.in.device_offset = r.begin;
  c.in.host_offset = static_cast<size_t>(rank) * r.size;
  c.in.width = r.size;
  c.in.rows = 1;
  // Every rank's piece k: row i from the slot's block i to the output's block i.
  c.out.device_offset = r.begin;
  c.out.device_pitch = bytes;
  c.out.host_pitch = r.size;
  c.out.width = r.size;
  c.out.rows = static_cast<size_t>(world);
  return c;
}

StagedChunk reduce_scatter_chunk(size_t count, size_t elem, int world, int rank, size_t chunk_elems,
                                 size_t chunk) {
  const ChunkRange r = chunk_range(count, chunk_elems, chunk);
  const size_t width = r.size * elem;
  StagedChunk c;
  // Piece k of every rank's block of the input, packed into the slot.
  c.in.device_offset = r.begin * elem;
  c.in.device_pitch = count * elem;
  c.in.host_pitch = width;
  c.in.width = width;
  c.in.rows = static_cast<size_t>(world);
  c.out.device_offset = r.begin * elem;
  c.out.host_offset = static_cast<size_t>(rank) * width;
  c.out.width = width;
  c.out.rows = 1;
  return c;
}

namespace {

// Chunks of one element-wise collective: chunk k of the input to chunk k of the output.
void run_elementwise(Staging& s, const void* input, void* output, size_t count, size_t elem,
                     bool copy_in, bool copy_out,
                     const std::function<void(unsigned char* slot, size_t chunk_count)>& run) {
  const size_t per_chunk = chunk_elems_for(s.chunk_bytes, elem);
  run_staging_pipeline(
      s.copier, input, output, chunks_for(count, per_chunk), std::min(count, per_chunk) * elem,
      [&](size_t k) { return elementwise_chunk(count, elem, per_chunk, k, copy_in, copy_out); },
      [&](size_t k, unsigned char* slot) { run(slot, chunk_range(count, per_chunk, k).size); });
}

}  // namespace

void staged_allreduce(Transport& t, Staging& s, const void* input, void* output, size_t count,
                      DType dtype, ReduceOp op, const std::string& forced_algorithm) {
  const size_t elem = dtype_size(dtype);
  const int hosts = count_hosts(t);
  run_elementwise(s, input, output, count, elem, true, true, [&](unsigned char* slot, size_t n) {
    allreduce_function(choose_allreduce_algorithm(n * elem, t.size(), hosts, forced_algorithm))(
        t, slot, slot, n, dtype, op, s.scratch);
  });
}

void staged_reduce(Transport& t, Staging& s, const void* input, void* output, size_t count,
                   DType dtype, ReduceOp op, int root) {
  // Only the root's output is defined afterwards, so only the root copies back.
  run_elementwise(
      s, input, output, count, dtype_size(dtype), true, t.rank() == root,
      [&](unsigned char* slot, size_t n) { ring_reduce(t, slot, slot, n, dtype, op, root); });
}

void staged_broadcast(Transport& t, Staging& s, const void* input, void* output, size_t bytes,
                      int root) {
  const bool is_root = t.rank() == root;
  run_elementwise(s, input, output, bytes, 1, is_root, !is_root || input != output,
                  [&](unsigned char* slot, size_t n) { ring_broadcast(t, slot, slot, n, root); });
}

void staged_allgather(Transport& t, Staging& s, const void* input, void* output, size_t bytes) {
  const int world = t.size(), rank = t.rank();
  run_staging_pipeline(
      s.copier, input, output, chunks_for(bytes, s.chunk_bytes),
      static_cast<size_t>(world) * std::min(bytes, s.chunk_bytes),
      [&](size_t k) { return allgather_chunk(bytes, world, rank, s.chunk_bytes, k); },
      [&](size_t k, unsigned char* slot) {
        const size_t n = chunk_range(bytes, s.chunk_bytes, k).size;
        ring_allgather(t, slot + static_cast<size_t>(rank) * n, slot, n);
      });
}

void staged_reduce_scatter(Transport& t, Staging& s, const void* input, void* output, size_t count,
                           DType dtype, ReduceOp op) {
  const int world = t.size(), rank = t.rank();
  const size_t elem = dtype_size(dtype), per_chunk = chunk_elems_for(s.chunk_bytes, elem);
  run_staging_pipeline(
      s.copier, input, output, chunks_for(count, per_chunk),
      static_cast<size_t>(world) * std::min(count, per_chunk) * elem,
      [&](size_t k) { return reduce_scatter_chunk(count, elem, world, rank, per_chunk, k); },
      [&](size_t k, unsigned char* slot) {
        const size_t n = chunk_range(count, per_chunk, k).size;
        ring_reduce_scatter(t, slot, slot + static_cast<size_t>(rank) * n * elem, n, dtype, op,
                            s.scratch);
      });
}

}  // namespace ringgrad::comm::collectives
