// Fingerprint: what a rank believes the current collective is (sequence number, kind, op,
// dtype, element count, root or tag, and whether its buffers are staged from a device). Each rank
// sends its fingerprint to every peer as the first bytes of each collective; CheckedTransport
// compares what arrives with its own.
#pragma once
#include <cstdint>
#include <string>

#include "comm/reduce_ops/reduce_op.h"
#include "core/dtype.h"

namespace ringgrad::comm {

enum class CollectiveKind : uint8_t {
  allreduce,
  broadcast,
  reduce,
  allgather,
  reduce_scatter,
  barrier,
  send_recv,
  gather,
  scatter,
  alltoall,  // count 0: the pairs check their split sizes in the exchange itself
  allreduce_coalesced,
  allgather_coalesced
};
const char* collective_kind_name(CollectiveKind kind);

struct Fingerprint {
  static constexpr uint32_t kMagic = 0x52474650;  // "RGFP"
  uint32_t magic = kMagic;
  CollectiveKind kind = CollectiveKind::barrier;
  ReduceOp op = ReduceOp::sum;  // only meaningful for reducing kinds
  DType dtype = DType::u8;
  uint8_t staged =
      0;  // 1: CUDA buffers, moved in staging chunks (comm/collectives/staged_collectives.h)
  uint64_t seq = 0;    // per group
  uint64_t count = 0;  // elements (per rank for allgather and reduce_scatter)
  int32_t root = -1;   // broadcast, reduce, gather and scatter; -1 for the other kinds
  int32_t tag = 0;     // send/recv (the nccl group's; the ring's go through PointToPoint)
};
static_assert(sizeof(Fingerprint) == 32, "fingerprints travel as 32 raw bytes");

// `root_or_tag`: the root of a rooted kind, the tag of a send_recv, ignored for the others; it
// lands in the field of that name.
Fingerprint make_fingerprint(CollectiveKind kind, uint64_t seq, DType dtype, uint64_t count,
                             ReduceOp op = ReduceOp::sum, int32_t root_or_tag = -1);

// "allreduce #5 (sum, float32, 12 elements)", "broadcast #2 (float32, 3 elements, root 1)".
std::string describe(const Fingerprint& f);
bool same_collective(const Fingerprint& a, const Fingerprint& b);

}  // namespace ringgrad::comm
