// provides: DistributedSampler. See Note [Sampler semantics] in sampler.h.
#include "common/data/sampler.h"

#include <torch/torch.h>

#include <cmath>

#include "common/basics/errors.h"

namespace ddp {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), rank_(rank), world_(world_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw UsageError("sampler: rank " + std::to_string(rank) + " outside world size " + std::to_string(world_size));
  }
  // The same float arithmetic as Python's math.ceil(...) on a true division.
  num_samples_ = drop_last && size_ % world_ != 0
                     ? static_cast<int64_t>(std::ceil(static_cast<double>(size_ - world_) / world_))
                     : static_cast<int64_t>(std::ceil(static_cast<double>(size_) / world_));
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(size_));
  if (shuffle_) {
    // torch.randperm with a generator seeded seed + epoch: the same kernel Python calls.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    auto perm = torch::randperm(size_, gen, torch::kInt64);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size_, all.begin());
  } else {
    for (int64_t i = 0; i < size_; ++i) all[static_cast<size_t>(i)] = i;
  }
  const int64_t total = pad_ ? total_size() : size_;  // without padding: no position past the list
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded list holds all[p mod size]: wrap-around padding.
  for (int64_t p = rank_; p < total; p += world_) mine.push_back(all[static_cast<size_t>(p % size_)]);
  return mine;
}

}  // namespace ddp
