// comm::Transport: the byte-moving interface the algorithms in comm/collectives/ talk to. It knows
// peers and ordered byte streams, nothing about reductions. Implementations:
// socket/SocketTransport (TCP, unix sockets, and shared memory through shm/ within a host);
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

  // Receives from `peer` completed since the transport was made (to tell who has arrived).
  virtual uint64_t recvs_completed(int peer) const = 0;

  // Describes a peer for messages: "rank 2 (10.0.0.5:40123)".
  virtual std::string describe_peer(int peer) const = 0;

  // Which host rank `r` (this rank included) runs on: ranks with equal values share a host,
  // which the hierarchical all-reduce groups them by.
  virtual std::string host_of(int r) const = 0;

  // Convenience: one send and one receive progressed together (never send-send deadlocks).
  void sendrecv(int dst, const void* send_data, size_t send_bytes, int src, void* recv_data,
                size_t recv_bytes) {
    post_recv(src, recv_data, recv_bytes);
    post_send(dst, send_data, send_bytes);
    wait_all();
  }

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

}  // namespace ringgrad::comm
