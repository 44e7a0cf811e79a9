// defines: DistributedSampler, Python's torch.utils.data.DistributedSampler index for index.
#pragma once
#include <cstdint>
#include <vector>

namespace ddp {

// Note [Sampler semantics]
// As Python's DistributedSampler (not LibTorch's DistributedRandomSampler, which hands out
// contiguous chunks and pads before shuffling): shuffle all indices with a generator seeded
// with seed + epoch, pad the list by wrapping around to a multiple of the world size (or cut
// it, with drop_last), then rank r takes every world-th index starting at r. Every rank gets
// the same number of samples, so every rank runs the same number of steps: ranks with one
// batch more than the others would meet the others' validation in their last all-reduce, and
// hang until the timeout or abort (05_ddp/going_further/join.md shows one).
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  // A new order every epoch, the same on every rank. Forget it and every epoch repeats the first.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Without padding (drop_last=False, no repeats: 05's --uneven-shards): each rank gets its own
  // share of the shuffled list and no more, so the first size % world ranks get one sample more
  // than the others, and ranks may run different numbers of batches (Note [Uneven inputs and
  // Join] in 05_ddp/beyond/join.cpp). num_samples() is then the largest share, rank 0's.
  void set_padding(bool pad) { pad_ = pad; }

  // This rank's indices for the current epoch (num_samples() of them; without padding, its own
  // share: as many, or one fewer).
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * world_; }

  // True when this rank's k-th sample is padding, a repeat of a sample another position holds
  // already: validation must not count it twice.
  bool is_padding(int64_t k) const { return rank_ + k * world_ >= size_; }

 private:
  int64_t size_, num_samples_;
  int rank_, world_;
  bool shuffle_, drop_last_, pad_ = true;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace ddp
