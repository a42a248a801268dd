// Reducer: DDP's gradient synchroniser (PyTorch c10d's Reducer). Gradients live as views in
// flat bucket buffers (no copy in or out); when the last gradient of a bucket is ready (the
// autograd grad-ready hook calls mark_ready), that bucket's asynchronous all-reduce (average)
// starts, while backward goes on computing earlier layers. Buckets launch strictly in index
// order on every rank (c10d's next_bucket_), so ranks issue the same collectives in the same
// order whatever their local readiness order. finalize_backward() waits for every bucket.
// After the first iteration the buckets are rebuilt once in the order gradients actually
// became ready (rank 0's order, broadcast). Single-threaded use from the backward thread.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/process_group/process_group.h"
#include "comm/reducer/bucket_assignment.h"
#include "core/choices.h"

namespace ringgrad::comm {

enum class GradCompression { none, fp16, bf16 };  // cast, all-reduce, cast back
inline const Choices<GradCompression> kGradCompressions{{"none", GradCompression::none},
                                                        {"fp16", GradCompression::fp16},
                                                        {"bf16", GradCompression::bf16}};

struct ReducerOptions {
  size_t bucket_cap_bytes = kDefaultBucketCapBytes;
  size_t first_bucket_bytes = kFirstBucketBytes;
  GradCompression compression = GradCompression::none;
};

// Seconds since the start of backward (prepare_for_backward), per bucket, of the last
// iteration: when its last gradient was ready, when its all-reduce was launched, and when that
// all-reduce completed (stamped by the thread that completed it, so a bucket that finished
// long before backward did shows it; where the backend does not say, when finalize_backward
// found it done). last_grad_s: when the last gradient of all arrived.
struct BucketTimes {
  double ready_s = 0, launched_s = 0, done_s = 0;
};
struct ReducerTimeline {
  std::vector<BucketTimes> buckets;
  double last_grad_s = 0;
};

class Reducer {
 public:
  using ViewsChanged = std::function<void(const std::vector<Tensor>& views)>;

  // params: parameter values (float32, all on one device: the CPU, or a GPU for the nccl
  // backend or the ring's staging) in registration order; names for messages. Buckets live
  // on the parameters' device; gradient compression casts on the host, so it needs CPU ones.
  // views_changed is called with the gradient views now and whenever buckets are rebuilt;
  // the caller makes them the parameters' gradients.
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup& group,
          ReducerOptions options, ViewsChanged views_changed);

  void prepare_for_backward();    // start of a synchronised backward
  void mark_ready(size_t param);  // from the grad-ready hook of parameter `param`
  void finalize_backward();       // waits for all buckets; throws naming unused parameters

  const BucketAssignment& buckets() const { return assignment_; }
  const ReducerTimeline& timeline() const { return timeline_; }
  size_t bytes_communicated() const { return bytes_communicated_; }  // all iterations

 private:
  struct Bucket {
    Tensor flat;        // (numel) float32: the gradients, concatenated
    Tensor compressed;  // (numel) f16/bf16 when compressing
    size_t pending = 0;
    WorkPtr work;
  };
  void build_buckets(const std::vector<size_t>& order);
  void launch(size_t bucket);
  double seconds_since_backward(std::chrono::steady_clock::time_point t) const;
  double now_s() const;

  std::vector<Tensor> params_;
  Device device_;  // of every parameter, so of every bucket
  std::vector<std::string> names_;
  ProcessGroup& group_;
  ReducerOptions options_;
  ViewsChanged views_changed_;

  BucketAssignment assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Tensor> views_;        // per parameter, into its bucket
  std::vector<size_t> bucket_of_;    // per parameter
  std::vector<bool> ready_;          // per parameter, this iteration
  size_t next_bucket_ = 0;           // lowest bucket not yet launched
  std::vector<size_t> ready_order_;  // first iteration: the order gradients arrived
  int iteration_ = 0;
  bool in_backward_ = false;
  std::chrono::steady_clock::time_point backward_start_;
  ReducerTimeline timeline_;
  size_t bytes_communicated_ = 0;
};

}  // namespace ringgrad::comm
