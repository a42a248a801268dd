// Fingerprint naming and comparison.
#include "comm/process_group/fingerprint.h"

#include "core/error.h"

namespace ringgrad::comm {

namespace {
bool reduces(CollectiveKind k) {
  return k == CollectiveKind::allreduce || k == CollectiveKind::reduce ||
         k == CollectiveKind::reduce_scatter || k == CollectiveKind::allreduce_coalesced;
}
bool has_root(CollectiveKind k) {
  return k == CollectiveKind::broadcast || k == CollectiveKind::reduce ||
         k == CollectiveKind::gather || k == CollectiveKind::scatter;
}
}  // namespace

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce: return "reduce";
    case CollectiveKind::allgather: return "allgather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::send_recv: return "send/recv";
    case CollectiveKind::gather: return "gather";
    case CollectiveKind::scatter: return "scatter";
    case CollectiveKind::alltoall: return "alltoall";
    case CollectiveKind::allreduce_coalesced: return "allreduce_coalesced";
    case CollectiveKind::allgather_coalesced: return "allgather_coalesced";
  }
  return "unknown collective";
}

Fingerprint make_fingerprint(CollectiveKind kind, uint64_t seq, DType dtype, uint64_t count,
                             ReduceOp op, int32_t root_or_tag) {
  Fingerprint f;
  f.kind = kind;
  f.seq = seq;
  f.dtype = kind == CollectiveKind::barrier ? DType::u8 : dtype;
  f.count = kind == CollectiveKind::barrier ? 0 : count;
  f.op = reduces(kind) ? op : ReduceOp::sum;
  f.root = has_root(kind) ? root_or_tag : -1;
  f.tag = kind == CollectiveKind::send_recv ? root_or_tag : 0;
  return f;
}

// Built for every collective (the Work's description), so with appends rather than str_cat,
// whose ostringstream costs a good part of a small all-reduce.
std::string describe(const Fingerprint& f) {
  if (f.magic != Fingerprint::kMagic)
    return "garbage (not a fingerprint: the streams are out of step)";
  std::string s = std::string(collective_kind_name(f.kind)) + " #" + std::to_string(f.seq);
  if (f.kind == CollectiveKind::barrier) return s;
  if (f.kind == CollectiveKind::alltoall) return s + " (" + dtype_name(f.dtype) + ")";
  s += " (";
  if (reduces(f.kind)) s += std::string(reduce_op_name(f.op)) + ", ";
  s += std::string(dtype_name(f.dtype)) + ", " + std::to_string(f.count) +
       (f.count == 1 ? " element" : " elements");
  if (has_root(f.kind)) s += ", root " + std::to_string(f.root);
  if (f.kind == CollectiveKind::send_recv) s += ", tag " + std::to_string(f.tag);
  if (f.staged) s += ", CUDA buffers";
  return s + ")";
}

bool same_collective(const Fingerprint& a, const Fingerprint& b) {
  return a.magic == b.magic && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype &&
         a.seq == b.seq && a.count == b.count && a.root == b.root && a.tag == b.tag &&
         a.staged == b.staged;
}

}  // namespace ringgrad::comm
