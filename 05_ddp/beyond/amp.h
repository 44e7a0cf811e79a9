// defines: Amp: mixed precision on CUDA, autocast in bf16, or fp16 with a gradient scaler.
#pragma once
#include <torch/torch.h>

#include <string>

namespace ddp {

// Note [Mixed precision and DDP]
// Autocast runs matrix products and convolutions in 16 bits; parameters, gradients and
// therefore DDP's buckets stay float32, so the all-reduce is unchanged. bf16 has float32's
// range and needs nothing more. fp16 does not: small gradients underflow to 0, so the loss is
// multiplied by a large scale before backward and the gradients divided by it before the
// step (PyTorch's GradScaler). An inf/NaN gradient means the scale was too large: the step is
// skipped and the scale halved. All ranks agree on that, because the averaged gradients they
// check are the same.
class Amp {
 public:
  // mode: "off", "bf16" or "fp16". Anything but "off" needs a CUDA device (UsageError otherwise).
  Amp(const std::string& mode, const torch::Device& device);

  // Forward passes inside autocast. Use as: { auto on = amp.autocast(); loss = ...; }
  struct Scope {
    explicit Scope(const Amp* a);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    const Amp* amp;
  };
  Scope autocast() const { return Scope(this); }

  // The loss to call backward() on (times the scale in fp16).
  torch::Tensor scale(const torch::Tensor& loss) const;
  // After backward: unscales the gradients (fp16); false if they hold inf/NaN and the step
  // must be skipped. Then adjusts the scale.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  // scaler.step(optimizer) in PyTorch: unscale_and_check(), then the optimizer's step, or a
  // line saying that step `step` was skipped.
  void step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, int64_t step);
  bool enabled() const { return mode_ != "off"; }

 private:
  std::string mode_;
  torch::Tensor scale_, growth_tracker_;
};

}  // namespace ddp
