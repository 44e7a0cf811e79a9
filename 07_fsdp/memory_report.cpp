// provides: report_memory(). See Note [What each rank holds].
#include "07_fsdp/memory_report.h"

#include "05_ddp/trainer/optimizer_state.h"
#include "common/basics/log.h"
#include "common/compute/tensor_memory.h"

namespace ch07 {

bool report_memory(const FullyShardedDataParallel& fsdp, const torch::optim::Optimizer& optimizer, int world) {
  const FullyShardedDataParallel::Sizes s = fsdp.sizes();
  int64_t rows = 0, grads = 0, state = 0;
  for (const torch::Tensor& p : fsdp.parameters()) {
    rows += p.numel();
    if (p.grad().defined()) grads += p.grad().numel();
    if (const auto* st = ddp::find_state(optimizer, p)) {
      for (const torch::Tensor& t : ddp::state_tensors(*st)) state += t.defined() ? t.numel() : 0;
    }
  }
  const int k = ddp::tensors_per_state(optimizer);
  const double held = 4.0 * static_cast<double>(rows + grads + state);
  ddp::log0("memory: this rank's shards: " + std::to_string(rows) + " parameters, " + std::to_string(grads) + " gradients, " +
            std::to_string(state) + " optimizer state (k = " + std::to_string(k) + "): " + ddp::mib(held) + " of float32; " +
            "the formula 4Ψ(2+k)/N: " + ddp::mib(4.0 * static_cast<double>(s.params) * (2 + k) / world) +
            "; whole while it computes, the largest unit: " + std::to_string(s.largest_unit) + " elements (" +
            ddp::mib(4.0 * static_cast<double>(s.largest_unit)) + " of parameters, in backward as much of gradient)");
  if (ddp::TensorMemory::started()) ddp::log(ddp::TensorMemory::peak_line());
  return state == k * rows;
}

}  // namespace ch07
