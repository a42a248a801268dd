// The ring collectives on device buffers: each splits its buffer into chunks of about
// `chunk_bytes` (per rank block for allgather and reduce_scatter), stages them through the
// StagingCopier's slots (staging_pipeline.h) and runs the host algorithm of ring_algorithms.h
// on each slot in place, reductions on the host. Every rank must stage (the chunks are
// separate collectives on the wire); the process group's fingerprint checks that. Arguments
// as in ring_algorithms.h, with device pointers for input and output.
#pragma once
#include <string>

#include "comm/collectives/algorithms.h"
#include "comm/collectives/staging_pipeline.h"

namespace ringgrad::comm::collectives {

// 4 MiB: large enough that a chunk's 2(n-1) ring steps are bandwidth- not latency-bound on
// TCP, small enough that the first copy in and the last copy out (not overlapped) stay short.
constexpr size_t kStagingChunkBytes = 4 << 20;

struct Staging {
  StagingCopier& copier;
  Scratch& scratch;
  size_t chunk_bytes = kStagingChunkBytes;
};

// Chunk k of `count` elements of `elem` bytes, `chunk_elems` per chunk: [begin, begin + size).
struct ChunkRange {
  size_t begin, size;
};
size_t chunks_for(size_t count, size_t chunk_elems);  // at least 1, so count 0 still meets
ChunkRange chunk_range(size_t count, size_t chunk_elems, size_t chunk);
size_t chunk_elems_for(size_t chunk_bytes, size_t elem);  // at least 1

// Plans, exposed for tests: in/out blocks of chunk k.
StagedChunk elementwise_chunk(size_t count, size_t elem, size_t chunk_elems, size_t chunk,
                              bool copy_in, bool copy_out);
StagedChunk allgather_chunk(size_t bytes, int world, int rank, size_t chunk_bytes, size_t chunk);
StagedChunk reduce_scatter_chunk(size_t count, size_t elem, int world, int rank, size_t chunk_elems,
                                 size_t chunk);

void staged_allreduce(Transport& t, Staging& s, const void* input, void* output, size_t count,
                      DType dtype, ReduceOp op, const std::string& forced_algorithm);
void staged_reduce(Transport& t, Staging& s, const void* input, void* output, size_t count,
                   DType dtype, ReduceOp op, int root);
void staged_broadcast(Transport& t, Staging& s, const void* input, void* output, size_t bytes,
                      int root);
void staged_allgather(Transport& t, Staging& s, const void* input, void* output, size_t bytes);
void staged_reduce_scatter(Transport& t, Staging& s, const void* input, void* output, size_t count,
                           DType dtype, ReduceOp op);

}  // namespace ringgrad::comm::collectives
