// Bucket assignment by size.
#include "comm/reducer/bucket_assignment.h"

#include "core/error.h"

namespace ringgrad::comm {

BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes,
                                           size_t bucket_cap_bytes, size_t first_bucket_bytes,
                                           const std::vector<size_t>& order) {
  std::vector<size_t> walk = order;
  if (walk.empty())
    for (size_t i = bytes.size(); i-- > 0;) walk.push_back(i);
  RG_CHECK_EQ(walk.size(), bytes.size(), "bucket order must list every parameter once");
  std::vector<bool> seen(bytes.size(), false);
  BucketAssignment buckets;
  std::vector<size_t> current;
  size_t current_bytes = 0;
  for (size_t index : walk) {
    RG_CHECK(index < bytes.size() && !seen[index], "bucket order lists parameter ", index,
             " twice or out of range");
    seen[index] = true;
    current.push_back(index);
    current_bytes += bytes[index];
    const size_t cap = buckets.empty() ? first_bucket_bytes : bucket_cap_bytes;
    if (current_bytes >= cap) {
      buckets.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace ringgrad::comm
