// DistributedSampler index arithmetic (semantics in sampler.h).
#include "nn/data/sampler.h"

#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace ringgrad::nn {

DistributedSampler::DistributedSampler(int64_t size, int num_replicas, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (size < 0) RG_THROW(InvalidArgument, "DistributedSampler: dataset size ", size, " < 0");
  if (num_replicas < 1)
    RG_THROW(InvalidArgument, "DistributedSampler: num_replicas ", num_replicas, " < 1");
  if (rank < 0 || rank >= num_replicas)
    RG_THROW(InvalidArgument, "DistributedSampler: rank ", rank, " is outside [0, ", num_replicas,
             ")");
}

DistributedSampler DistributedSampler::for_evaluation(int64_t size, int num_replicas, int rank) {
  DistributedSampler s(size, num_replicas, rank, /*shuffle=*/false, /*seed=*/0,
                       /*drop_last=*/false);
  s.pad_ = false;
  return s;
}

int64_t DistributedSampler::num_samples() const {
  if (!pad_) return (size_ - rank_ + num_replicas_ - 1) / num_replicas_;  // |{r, r+R, ...} < size|
  if (drop_last_) return size_ / num_replicas_;
  return (size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) order[i] = i;
  if (shuffle_) {
    // Fisher-Yates: position i takes a uniform pick of the not-yet-placed order[0..i].
    Generator gen(seed_ + static_cast<uint64_t>(epoch_));
    for (int64_t i = size_ - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<int64_t>(gen.below(static_cast<uint64_t>(i) + 1))]);
  }
  // Position p of the padded (or truncated) list is order[p % size]: padding wraps from the start.
  const int64_t count = num_samples();
  std::vector<int64_t> mine(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) mine[k] = order[(rank_ + k * num_replicas_) % size_];
  return mine;
}

}  // namespace ringgrad::nn
