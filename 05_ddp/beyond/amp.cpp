// provides: Amp. See Note [Mixed precision and DDP].
#include "05_ddp/beyond/amp.h"

#include "common/group/compat.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

Amp::Amp(const std::string& mode, const torch::Device& device) : mode_(mode) {
  if (mode_ == "off") return;
  if (!device.is_cuda()) {
    throw UsageError("--amp " + mode_ + " needs a CUDA GPU (this rank runs on " + device.str() +
                     "): mixed precision here is for GPUs; on CPU train without --amp");
  }
  if (mode_ == "fp16") {
    scale_ = torch::full({1}, 65536.0, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    growth_tracker_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(device));
  }
}

Amp::Scope::Scope(const Amp* a) : amp(a) {
  if (amp->enabled()) set_cuda_autocast(true, amp->mode_ == "fp16" ? at::kHalf : at::kBFloat16);
}
Amp::Scope::~Scope() {
  if (amp->enabled()) set_cuda_autocast(false, amp->mode_ == "fp16" ? at::kHalf : at::kBFloat16);
}

torch::Tensor Amp::scale(const torch::Tensor& loss) const { return mode_ == "fp16" ? loss * scale_ : loss; }

bool Amp::unscale_and_check(const std::vector<torch::Tensor>& params) {
  if (mode_ != "fp16") return true;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  auto found_inf = torch::zeros({1}, scale_.options());
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale_.reciprocal());
  // Halve at once after an overflow; double after 2000 clean steps (GradScaler's defaults).
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, 2.0, 0.5, 2000);
  return found_inf.item<float>() == 0;
}

void Amp::step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, int64_t step) {
  if (unscale_and_check(params)) {
    optimizer.step();
  } else {
    log0("fp16: inf/NaN gradients at step " + std::to_string(step) + ": step skipped, loss scale halved");
  }
}

}  // namespace ddp
