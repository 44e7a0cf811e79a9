// provides: DeviceBatches. See Note [The data path on a GPU].
#include "05_ddp/trainer/batches.h"

#include <cstdio>

#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace ddp {

DeviceBatches::DeviceBatches(const Dataset& data, const torch::Device& device) : device_(device) {
  if (!device.is_cuda()) {
    images_ = data.images, labels_ = data.labels;
    return;
  }
  const double mb = static_cast<double>(data.images.nbytes() + data.labels.nbytes()) / 1e6;
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f MB", mb);
  std::string where;
  try {
    images_ = data.images.to(device), labels_ = data.labels.to(device);
    where = "resident on " + device.str() + " (" + size + ")";
  } catch (const c10::Error& e) {
    if (short_what(e).find("out of memory") == std::string::npos) throw;
    resident_ = false;
    images_ = data.images.pin_memory(), labels_ = data.labels.pin_memory();
    where = std::string("pinned host memory, copied per batch (") + size + " did not fit on " + device.str() + ")";
  }
  log0("data: " + where);
}

void DeviceBatches::set_order(const std::vector<int64_t>& order) {
  if (observer_) order_list_ = order;
  order_ = torch::tensor(order, torch::kInt64);
  if (resident_) order_ = order_.to(device_);
}

std::pair<torch::Tensor, torch::Tensor> DeviceBatches::get(int64_t from, int64_t to) const {
  if (observer_) observer_(order_list_, from, to);
  const torch::Tensor sel = order_.slice(0, from, to);
  if (resident_) return {images_.index_select(0, sel), labels_.index_select(0, sel)};
  // Gathered into pinned memory, so that the copy is asynchronous to the host.
  return {images_.index_select(0, sel).pin_memory().to(device_, /*non_blocking=*/true),
          labels_.index_select(0, sel).pin_memory().to(device_, /*non_blocking=*/true)};
}

}  // namespace ddp
