// DistributedSampler: which dataset indices each rank visits in an epoch, with the semantics of
// torch.utils.data.DistributedSampler, plus an evaluation mode that shards without padding.
// A sampler is a small value (sizes and a seed); indices() is a pure function of it and the
// epoch, so every rank computes its own shard with no communication.
#pragma once
#include <cstdint>
#include <vector>

namespace ringgrad::nn {

class DistributedSampler {
 public:
  // Training mode, as torch: with `shuffle` the order is a permutation of range(size) drawn
  // (Fisher-Yates on core/rng's Generator) from seed + epoch — the same on every rank, though not
  // torch's bit stream. Then either padded by wrapping from the start to
  // total_size = ceil(size / num_replicas) * num_replicas (so every rank gets the same count and
  // a few samples repeat), or with `drop_last` cut to floor(size / num_replicas) * num_replicas.
  // Rank r takes positions r, r + num_replicas, ... Throws InvalidArgument for size < 0,
  // num_replicas < 1 or rank outside [0, num_replicas). num_replicas = 1: a plain shuffler.
  DistributedSampler(int64_t size, int num_replicas = 1, int rank = 0, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // Evaluation mode: unshuffled, unpadded, nothing dropped. Rank r takes r, r + num_replicas, ...
  // of range(size), so across ranks every sample is counted exactly once; ranks may get counts
  // differing by one, so sum (correct, count) over ranks, not per-rank accuracies.
  static DistributedSampler for_evaluation(int64_t size, int num_replicas, int rank);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  std::vector<int64_t> indices() const;   // this rank's indices for the current epoch
  int64_t num_samples() const;            // indices().size(), the same in every epoch
  int64_t size() const { return size_; }  // the dataset size sampled from

 private:
  int64_t size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  bool pad_ = true;  // false only in evaluation mode
  int64_t epoch_ = 0;
};

}  // namespace ringgrad::nn
