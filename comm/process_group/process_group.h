// comm::ProcessGroup: the collectives interface (PyTorch c10d's shape). Every call returns a
// Work at once; collectives of one group run in issue order on the group's worker thread (or on
// a thread that waits for one before the worker took it, see Work::wait), so a DDP hook can
// launch a bucket's all-reduce and wait for it later. Tensors are contiguous; the
// ring backend takes CPU and CUDA tensors (CUDA ones staged through pinned host memory), the
// nccl backend CUDA tensors. In-place calls take one tensor, out-of-place calls an input and an
// output. Every collective has a deadline (its options' timeout, else the group's) and fails
// with an error naming the operation, the peer rank and how long it waited.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group/work.h"
#include "comm/reduce_ops/reduce_op.h"
#include "comm/store/store.h"
#include "core/choices.h"
#include "core/tensor.h"

namespace ringgrad::comm {

// A zero timeout in the options means "the group's timeout".
struct AllreduceOptions {
  ReduceOp op = ReduceOp::sum;
  Milliseconds timeout{0};
};
struct BroadcastOptions {
  int root = 0;
  Milliseconds timeout{0};
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Milliseconds timeout{0};
};
struct AllgatherOptions {
  Milliseconds timeout{0};
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  Milliseconds timeout{0};
};
struct BarrierOptions {
  Milliseconds timeout{0};
};
struct SendRecvOptions {
  int tag = 0;
  Milliseconds timeout{0};
};
constexpr int kAnySource = -1;  // recv's source: whichever rank sends a message of the tag first
struct GatherOptions {
  int root = 0;
  Milliseconds timeout{0};
};
using ScatterOptions = GatherOptions;
struct AlltoallOptions {
  // Elements sent to / received from each rank, in rank order; empty: equal blocks.
  std::vector<int64_t> send_splits, recv_splits;
  Milliseconds timeout{0};
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  // How this rank reaches its peers ("shm to 1,2; tcp to 3"), for logs and benchmark headers.
  virtual std::string describe_links() const { return backend_name(); }

  virtual WorkPtr allreduce(const Tensor& tensor, const AllreduceOptions& opts = {}) = 0;
  virtual WorkPtr allreduce(const Tensor& input, const Tensor& output,
                            const AllreduceOptions& opts = {}) = 0;
  virtual WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& opts = {}) = 0;
  virtual WorkPtr broadcast(const Tensor& input, const Tensor& output,
                            const BroadcastOptions& opts = {}) = 0;
  // Only the root's tensor/output holds the result; other ranks' are scratch afterwards.
  virtual WorkPtr reduce(const Tensor& tensor, const ReduceOptions& opts = {}) = 0;
  virtual WorkPtr reduce(const Tensor& input, const Tensor& output,
                         const ReduceOptions& opts = {}) = 0;
  // output: size() * input.numel() elements, rank r's input at block r. In place: `output`
  // alone, with this rank's block already in position.
  virtual WorkPtr allgather(const Tensor& input, const Tensor& output,
                            const AllgatherOptions& opts = {}) = 0;
  WorkPtr allgather_inplace(const Tensor& output, const AllgatherOptions& opts = {});
  // input: size() * output.numel() elements; output = block `rank` of the reduction. In
  // place: `tensor` alone, result in its block `rank`.
  virtual WorkPtr reduce_scatter(const Tensor& input, const Tensor& output,
                                 const ReduceScatterOptions& opts = {}) = 0;
  WorkPtr reduce_scatter_inplace(const Tensor& tensor, const ReduceScatterOptions& opts = {});
  virtual WorkPtr barrier(const BarrierOptions& opts = {}) = 0;
  // Matched per (source, destination, tag), in issue order within each (as PyTorch's Gloo
  // backend); a send may complete before its receive is posted. `src` may be kAnySource (the
  // ring backend): the Work of a receive then says where the message came from (RecvWork).
  virtual WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& opts = {}) = 0;
  virtual WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& opts = {}) = 0;

  // Backends without these throw InvalidArgument naming the backend (the nccl one, today).
  // gather: every rank's input lands on the root, in `output` (size() * input.numel()
  // elements, rank r's at block r; read only on the root, may be undefined elsewhere).
  virtual WorkPtr gather(const Tensor& input, const Tensor& output, const GatherOptions& opts = {});
  // scatter: block r of the root's input (size() * output.numel(); read only there) lands in
  // rank r's output.
  virtual WorkPtr scatter(const Tensor& input, const Tensor& output,
                          const ScatterOptions& opts = {});
  // alltoall: input's block p goes to rank p, rank p's block for this rank lands at block p of
  // output; blocks as opts' splits say (each rank's send split for q equal to q's receive split
  // for it), else equal. Out of place.
  virtual WorkPtr alltoall(const Tensor& input, const Tensor& output,
                           const AlltoallOptions& opts = {});
  // One all-reduce over several tensors of one dtype, in place (PyTorch's allreduce_coalesced).
  virtual WorkPtr allreduce_coalesced(const std::vector<Tensor>& tensors,
                                      const AllreduceOptions& opts = {});
  // One all-gather of several tensors: outputs[r * inputs.size() + i] gets rank r's inputs[i].
  virtual WorkPtr allgather_coalesced(const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor>& outputs,
                                      const AllgatherOptions& opts = {});
  // A barrier that names the ranks that did not arrive (comm/process_group/monitored_barrier.h);
  // blocking, on the caller's thread, within `timeout` as given (0: no wait at all).
  virtual void monitored_barrier(Milliseconds timeout, bool wait_all_ranks = false);
  // Collectives issued on this group so far (equal on every rank that issued the same ones).
  virtual uint64_t sequence_number();

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

struct ProcessGroupOptions {
  std::string group_name = "default";  // groups sharing a store need distinct names
  Milliseconds timeout{0};             // 0: RINGGRAD_TIMEOUT_S, else 10 minutes
  Milliseconds setup_timeout{0};       // connecting the ranks; 0: same as timeout
  std::string run_id;                  // checked in the connection handshake
  int64_t generation = 0;
  std::string
      allreduce_algorithm;  // ring | recursive_doubling | direct; "": RINGGRAD_ALGO, else by size
  // ring: how ranks on this host are reached: auto | shm | unix | tcp; "": RINGGRAD_TRANSPORT,
  // else auto (docs/shared-memory.md). Ranks may differ (their pairs then agree on a socket).
  std::string transport;
  // The store's host, which the ring routes towards to pick its network interface; "":
  // MASTER_ADDR, else this host (an in-process store).
  std::string store_host;
  DeviceType tensor_device = DeviceType::cpu;  // where this group's tensors live ("auto")
  int cuda_device = -1;                        // nccl: the GPU; -1: LOCAL_RANK (0 when unset)
};

constexpr Milliseconds kDefaultCollectiveTimeout{600'000};
Milliseconds default_collective_timeout();  // RINGGRAD_TIMEOUT_S, else 10 minutes

// ring: ours, over sockets (CPU or CUDA tensors). nccl: CUDA tensors; create_process_group
// throws when this build has no NCCL or no CUDA device is visible. automatic ("auto"): nccl
// when options.tensor_device is CUDA, the build has NCCL and a CUDA device is visible, else ring
// (so CPU tensors always get ring, whatever the machine).
enum class Backend { ring, nccl, automatic };
inline const Choices<Backend> kBackends{
    {"ring", Backend::ring}, {"nccl", Backend::nccl}, {"auto", Backend::automatic}};

// A group of `backend` (above). Blocks until all ranks are connected.
std::unique_ptr<ProcessGroup> create_process_group(Backend backend, std::shared_ptr<Store> store,
                                                   int rank, int size,
                                                   ProcessGroupOptions options = {});

}  // namespace ringgrad::comm
