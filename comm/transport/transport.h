// comm::Transport: the byte-moving interface the algorithms in comm/collectives/ talk to. It knows
// peers and ordered byte streams; of reductions only the receive that folds what it receives
// into a buffer (recv_reduce), so a transport that can read the peer's bytes where they lie
// (shared memory) reduces from there instead of copying them out first. Implementations:
// MeshTransport (a Link per peer: a TCP or unix socket, or shared memory within a host);
// collectives/SubsetTransport (some ranks of another as a group).
// Contract: single-threaded (the process group's worker thread); every wait honours the
// deadline set by begin() and throws IoError / TimeoutError naming the operation and the peer.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/reduce_ops/reduce_op.h"
#include "core/dtype.h"

namespace ringgrad::comm {

using Clock = std::chrono::steady_clock;

// What a transport calls the running operation in its errors: a fixed text, or a function that
// builds it, called only when an error needs it (for a small collective, formatting its
// description costs more than moving its bytes). What the function reads must stay valid until
// the next begin().
class OperationName {
 public:
  OperationName(std::string text) : text_(std::move(text)) {}  // NOLINT: implicit by design
  OperationName(const char* text) : text_(text) {}             // NOLINT: implicit by design
  explicit OperationName(std::function<std::string()> build) : build_(std::move(build)) {}
  std::string str() const { return build_ ? build_() : text_; }

 private:
  std::string text_;
  std::function<std::string()> build_;
};

// Where a reducing receive puts what it receives: dst[i] = local[i] (op) received[i], for
// elements of `dtype` (avg combines as sum). dst may be local; neither may be a buffer a
// pending send reads.
struct Reduction {
  void* dst;
  const void* local;
  DType dtype;
  ReduceOp op;
};

class Transport {
 public:
  virtual ~Transport() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Names the operation ("allreduce #5 (...)") for error messages and sets its deadline.
  virtual void begin(OperationName operation, Clock::time_point deadline) = 0;

  // Queue bytes for `peer`. Per peer, sends complete in the order they were posted, and so do
  // receives; the buffers must stay valid until a wait covers them. Never blocks.
  virtual void post_send(int peer, const void* data, size_t bytes) = 0;
  virtual void post_recv(int peer, void* data, size_t bytes) = 0;

  // Progresses all queued I/O until the oldest receive from `peer` that no earlier wait_recv
  // covered is complete (it may have completed already).
  virtual void wait_recv(int peer) = 0;
  // Progresses all queued I/O until every posted send and receive is complete.
  virtual void wait_all() = 0;

  // Receives `bytes` (whole elements) from `peer`, in stream order after every receive posted
  // before it, and folds them into `into`; returns when that is done. The default lands them
  // in a scratch buffer and then reduces (two passes over the bytes); the shared-memory link
  // reduces straight from where the peer's bytes lie. Either way the result is bitwise the
  // same: reduce_into(into.dst, into.local, received). Every receive posted earlier from `peer`
  // must have been waited for.
  virtual void recv_reduce(int peer, const Reduction& into, size_t bytes);

  // Receives from `peer` completed since the transport was made (to tell who has arrived).
  virtual uint64_t recvs_completed(int peer) const = 0;

  // Describes a peer for messages: "rank 2 (10.0.0.5:40123)".
  virtual std::string describe_peer(int peer) const = 0;

  // Which host rank `r` (this rank included) runs on: ranks with equal values share a host,
  // which the hierarchical all-reduce groups them by.
  virtual std::string host_of(int r) const = 0;

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
  std::vector<unsigned char> landing_;  // the default recv_reduce's scratch (grown, never shrunk)
};

}  // namespace ringgrad::comm
