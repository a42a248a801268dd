// The collective algorithms of the ring backend, written against Transport only (Gloo's split
// of algorithm and transport). Inputs and outputs are host buffers of `count` elements of
// `dtype`; out-of-place calls leave the input untouched, and input == output means in place.
// Every rank ends with bitwise identical results: the ring all-gathers finished bytes and the
// recursive doubling combines commutatively and the direct algorithm in rank order. `scratch` holds
// the caller's reusable buffers (grown, never shrunk).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "comm/reduce_ops/reduce_kernels.h"
#include "comm/transport/transport.h"

namespace ringgrad::comm::collectives {

struct Scratch {
  using Buffer = std::vector<unsigned char>;
  // Whole-buffer copies for the small-message all-reduces: recursive doubling's second
  // partial result, the direct all-reduce's n ranks' buffers side by side.
  Buffer whole_buffers;
  Buffer partials;  // out-of-place reduce-scatter's running sums
  // The hierarchical all-reduce's landing places for the chunks of its host mates, filled
  // while the all-reduce across hosts uses the other two.
  Buffer host_mate_chunks;
};

// Reduce-scatter then all-gather over n chunks, 2(n-1) pipelined steps; sends 2(n-1)/n of the
// buffer per rank, which is bandwidth-optimal.
void ring_allreduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                    ReduceOp op, Scratch& scratch);

// Recursive doubling: log2(p) exchanges of the whole buffer (p = largest power of two <= n;
// the other ranks fold into a partner first). Latency-optimal for small messages.
void recursive_doubling_allreduce(Transport& t, const void* input, void* output, size_t count,
                                  DType dtype, ReduceOp op, Scratch& scratch);

// Every rank sends its buffer to every other and combines all n in rank order: one round,
// (n-1) buffers sent per rank. Latency-optimal for tiny messages.
void direct_allreduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                      ReduceOp op, Scratch& scratch);

// For a group over several hosts (as Transport::host_of says): reduce-scatter inside each host,
// all-reduce each chunk among one rank per host (R of them side by side with R ranks per host),
// all-gather inside each host, pipelined slice by slice so the phases inside a host hide behind
// the one across hosts. Bandwidth-optimal when the links between hosts are the bottleneck.
void hierarchical_allreduce(Transport& t, const void* input, void* output, size_t count,
                            DType dtype, ReduceOp op, Scratch& scratch);

// Result only on `root` (output there); other ranks' outputs hold partial sums afterwards.
void ring_reduce(Transport& t, const void* input, void* output, size_t count, DType dtype,
                 ReduceOp op, int root);

// input: n * count elements; output: count elements = chunk `rank` of the reduction.
// In place when output == input + rank * count (NCCL's convention).
void ring_reduce_scatter(Transport& t, const void* input, void* output, size_t count, DType dtype,
                         ReduceOp op, Scratch& scratch);

// input: `bytes` per rank; output: n * bytes, rank r's block at r * bytes. In place when
// input == output + rank * bytes.
void ring_allgather(Transport& t, const void* input, void* output, size_t bytes);

// Root's input reaches every rank's output along a pipelined chain (root -> root+1 -> ...).
void ring_broadcast(Transport& t, const void* input, void* output, size_t bytes, int root);

enum class AllreduceAlgorithm { ring, recursive_doubling, direct, hierarchical };
// By size: up to kDirectMaxBytes direct, up to kRecursiveDoublingMaxBytes recursive doubling,
// above that the ring, or the hierarchical all-reduce when the group spans several hosts
// (`hosts`, see count_hosts) and some host has more than one rank. Below the second limit the
// ring's 2(n-1) latency-bound steps cost more than recursive doubling's extra bytes; below the
// first, one round beats log2(n) rounds. The measurements behind both limits are in
// docs/measurements.md. RINGGRAD_ALGO=ring|recursive_doubling|direct|hierarchical forces one
// (`forced`, empty = by size); "tree" is accepted as the old name of recursive_doubling.
constexpr size_t kDirectMaxBytes = 4 << 10;
constexpr size_t kRecursiveDoublingMaxBytes = 64 << 10;
AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int world, int hosts,
                                              const std::string& forced);
int count_hosts(const Transport& t);  // distinct Transport::host_of values
using AllreduceFn = void (*)(Transport&, const void*, void*, size_t, DType, ReduceOp, Scratch&);
AllreduceFn allreduce_function(AllreduceAlgorithm algorithm);

}  // namespace ringgrad::comm::collectives
