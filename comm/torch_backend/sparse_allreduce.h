// SparseAllreduce: all_reduce (SUM) of a sparse COO CPU tensor for the ringgrad backend, made of
// the ring group's collectives and point-to-point (ringgrad's core has no sparse tensors).
// Used by RinggradBackend::allreduce_sparse; one per backend, with one thread, started at the
// first sparse all-reduce.
//
// Algorithm. On the caller's thread each rank coalesces its tensor, issues an all-gather of a
// header (nnz, sparse and dense dims, dtype, sizes) as a collective of the group, in issue order
// with the others, and sends its indices (sparse_dim, nnz) and values (nnz, dense sizes...) to
// every peer on a tag of this all-reduce's own. Then, on SparseAllreduce's thread: once the
// headers are in, every peer's indices and values are received (their sizes now known), put end
// to end in rank order with this rank's and coalesced, which adds up the values of equal indices:
// the sum, the same on every rank. Point-to-point is matched per (peer, direction, tag) beside
// the collective queue, so this step waits only for what every peer sent when it issued the
// all-reduce, never for a later collective, whichever order ranks wait in; and the call returns
// once it has issued.
#pragma once
#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/process_group/process_group.h"

namespace ringgrad::torch_backend {

class SparseAllreduce {
 public:
  explicit SparseAllreduce(comm::ProcessGroup& group) : group_(group) {}
  ~SparseAllreduce();  // finishes the all-reduces started (each within its timeout), then joins

  // Starts the all-reduce of `tensor` (sparse COO, CPU; checked by the caller); the Work
  // completes once `tensor` holds the sum (in place, coalesced), or fails naming the operation.
  // Each step waits at most `timeout` (0: the group's). Not thread-safe: one caller at a time,
  // the same all-reduces in the same order on every rank, as for any collective.
  comm::WorkPtr start(const at::Tensor& tensor, comm::Milliseconds timeout);

 private:
  struct Job;
  void loop();
  void finish(Job& job);  // the thread's part: receive, add up, write the sum

  comm::ProcessGroup& group_;
  int64_t started_ = 0;  // all-reduces started so far; numbers each one's tag
  std::mutex mu_;        // guards what follows
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringgrad::torch_backend
