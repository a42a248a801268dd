// Which gradients share a bucket, as PyTorch's DDP decides it: walk the parameters in the
// given order (reverse registration order by default, since backward produces the last
// layers' gradients first), filling a bucket until it holds at least its cap; the first
// bucket's cap is small (1 MiB) so the first all-reduce starts early in backward, the rest use
// bucket_cap (25 MiB). A pure function, so it is tested on its own.
#pragma once
#include <cstddef>
#include <vector>

namespace ringgrad::comm {

constexpr size_t kFirstBucketBytes = size_t{1} << 20;
constexpr size_t kDefaultBucketCapBytes = size_t{25} << 20;

using BucketAssignment = std::vector<std::vector<size_t>>;  // buckets of parameter indices

// bytes[i]: the gradient size of parameter i (registration order). order: the order in which
// to walk the parameters (empty: reverse registration order). Every index appears once.
BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes,
                                           size_t bucket_cap_bytes,
                                           size_t first_bucket_bytes = kFirstBucketBytes,
                                           const std::vector<size_t>& order = {});

}  // namespace ringgrad::comm
