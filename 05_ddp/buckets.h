// defines: the bucket plan, assign_buckets() (Note [Buckets] in ddp.cpp): which gradients share
// an all-reduce. Arithmetic on sizes only, without LibTorch, so that bench's ddp_sim cuts its
// simulated buckets by this very rule and starts in milliseconds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ddp {

constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kFirstBucketBytes = 1 * kMiB;  // PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES
// As the bucket cap: every gradient in one bucket, all-reduced once backward has ended (no
// overlap), the baseline that buckets are measured against (05 --one-bucket).
constexpr size_t kOneBucket = SIZE_MAX;

// Which parameters go into which bucket: walk `order` (indices into `sizes_bytes`), fill a
// bucket until it holds at least its limit, then start the next. The first bucket's limit is
// first_limit, every later one cap (PyTorch's compute_bucket_assignment_by_size).
inline std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& sizes_bytes,
                                                       size_t first_limit, size_t cap) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  size_t bytes = 0, limit = first_limit;
  for (size_t i : order) {
    current.push_back(i);
    bytes += sizes_bytes[i];
    if (bytes >= limit) {
      buckets.push_back(std::move(current));
      current.clear();
      bytes = 0;
      limit = cap;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace ddp
