// DistributedDataParallel: a thin wrapper that makes a Module data-parallel over a
// ProcessGroup, as torch.nn.parallel.DistributedDataParallel. At construction it checks that
// every rank holds the same parameters and buffers and copies rank 0's values everywhere; each
// forward broadcasts rank 0's buffers (BN running statistics, as PyTorch's broadcast_buffers);
// each backward averages the gradients through the comm::Reducer, whose buckets all-reduce as
// soon as their gradients are ready. no_sync() skips the all-reduce for gradient accumulation.
#pragma once
#include <memory>

#include "comm/reducer/reducer.h"
#include "nn/modules/module.h"

namespace ringgrad::nn {

struct DdpOptions {
  comm::ReducerOptions reducer;
  bool broadcast_buffers = true;
  // After each synchronised forward, walk the graph and mark the parameters it cannot reach
  // ready at once (their bucket slots hold this rank's contribution: zeros, or what no_sync
  // accumulated), so models whose forward skips parameters still reduce every bucket.
  bool find_unused_parameters = false;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<Module> module, comm::ProcessGroup& group,
                          DdpOptions options = {});
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Variable forward(const Variable& x);
  Module& module() { return *module_; }
  comm::Reducer& reducer() { return *reducer_; }
  comm::ProcessGroup& group() { return group_; }

  // While a NoSync lives, backward accumulates gradients locally without communication; the
  // next synchronised backward averages the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) {
      ddp.sync_ = false;
    }
    ~NoSync() { ddp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

 private:
  void on_grad_ready(size_t param);
  void mark_unused_ready(const Variable& out);
  void broadcast_buffers();

  std::shared_ptr<Module> module_;
  comm::ProcessGroup& group_;
  DdpOptions options_;
  std::vector<Variable> params_;
  std::unique_ptr<comm::Reducer> reducer_;
  bool sync_ = true;               // false inside no_sync()
  bool backward_pending_ = false;  // forward prepared the reducer; backward has not finished
  bool finalize_queued_ = false;
  std::vector<Tensor> float_buffers_, int_buffers_;  // coalesced per dtype for broadcasting
  Tensor float_flat_, int_flat_;
};

}  // namespace ringgrad::nn
