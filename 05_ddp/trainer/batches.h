// defines: DeviceBatches: a rank's batches drawn where the model runs, without a host round trip.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "common/data/fashion_mnist.h"

namespace ddp {

// Note [The data path on a GPU]
// Chapter 05 on the CPU picks a batch with index_select and is done. On a GPU the obvious port,
// pick on the host and copy each batch (.to(device)), costs a host->device copy and a wait
// every step, and an MLP step's arithmetic on an H100 is ~10 us: the copies and launches are
// the step. So the dataset goes to the device once (Fashion-MNIST is 188 MB of float32; a GPU
// has tens of GB), the epoch's order goes once per epoch, and each batch is an index_select on
// the device: nothing waits for the host. A dataset that does not fit stays in pinned host
// memory and each batch is copied asynchronously (non_blocking), overlapping the last step's
// kernels. On the CPU the same code is the old index_select: bit-identical results.
class DeviceBatches {
 public:
  // On a GPU it logs where the data went: "data: resident on cuda:0 (188.2 MB)", or "data: pinned
  // host memory, copied per batch (...)".
  DeviceBatches(const Dataset& data, const torch::Device& device);
  // This rank's sample order for the epoch (DistributedSampler::indices()).
  void set_order(const std::vector<int64_t>& order);
  // Images and labels of order[from, to), on the device.
  std::pair<torch::Tensor, torch::Tensor> get(int64_t from, int64_t to) const;
  // Called by every get() with the epoch's order and [from, to): who reads which samples
  // (--record-samples), without the training loop knowing it.
  using Observer = std::function<void(const std::vector<int64_t>& order, int64_t from, int64_t to)>;
  void observe(Observer observer) { observer_ = std::move(observer); }

 private:
  torch::Device device_;
  bool resident_ = true;  // the data lives on device_ (always true on the CPU)
  torch::Tensor images_, labels_, order_;
  std::vector<int64_t> order_list_;  // order_ as the host knows it, for the observer
  Observer observer_;
};

}  // namespace ddp
