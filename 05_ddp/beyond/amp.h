// defines: Amp: mixed precision on CUDA, autocast in bf16, or fp16 with a gradient scaler, put
// around the trainer's loss function and optimizer so that its loop is the same with or without.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "05_ddp/trainer/trainer.h"

namespace ddp {

// Note [Mixed precision and DDP]
// Autocast runs matrix products and convolutions in 16 bits; parameters, gradients and
// therefore DDP's buckets stay float32, so the all-reduce is unchanged. bf16 has float32's
// range and needs nothing more. fp16 does not: small gradients underflow to 0, so the loss is
// multiplied by a large scale before backward and the gradients divided by it before the
// step (PyTorch's GradScaler). An inf/NaN gradient means the scale was too large: the step is
// skipped and the scale halved. All ranks agree on that, because the averaged gradients they
// check are the same.
//
// Python writes the three places in its loop (torch/amp/grad_scaler.py, 2.x):
//   with torch.autocast("cuda", dtype): loss = criterion(model(x), y)
//   scaler.scale(loss).backward();  scaler.step(optimizer);  scaler.update()
// Here wrap() puts them around the trainer's loss function and optimizer instead, so that
// main.cpp's loop reads as a loop without --amp:
// - the loss function runs inside autocast, the model's forward and the loss both, as `with`;
// - fp16: the loss's gradient, not the loss, is multiplied by the scale, by a hook on the loss
//   tensor. backward() then computes what scale(loss).backward() computes, bit for bit: the
//   scale is a power of two, and multiplying a float32 by one before or after a product or a
//   sum gives the same bits (short of overflow to inf, which the check below catches);
// - fp16: the optimizer's step() unscales and checks the gradients first, then steps or skips
//   (scaler.step and scaler.update in one).
class Amp {
 public:
  // mode: "off", "bf16" or "fp16". Anything but "off" needs a CUDA device (UsageError otherwise).
  Amp(const std::string& mode, const torch::Device& device);

  // The loss function inside autocast, its gradient scaled (fp16); "off": unchanged.
  void wrap(LossFn& loss_of) const;
  // fp16: the factory's optimizer inside a gradient scaler's step; otherwise unchanged.
  void wrap(OptimizerFactory& make_optimizer);
  // The step the next optimizer step belongs to (counted from 1, as the progress lines), for
  // the line saying it was skipped.
  void at_step(int64_t step) { step_ = step; }

  // After backward: unscales the gradients (fp16); false if they hold inf/NaN and the step
  // must be skipped. Then adjusts the scale.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  int64_t step() const { return step_; }

 private:
  std::string mode_;
  at::ScalarType dtype_;
  torch::Tensor scale_, growth_tracker_;
  int64_t step_ = 0;
};

// scaler.scale(loss).backward() as a hook: returns `loss`, whose gradient backward() multiplies
// by `scale` (a one-element tensor, read when backward runs) before passing it on.
torch::Tensor with_scaled_gradient(const torch::Tensor& loss, const torch::Tensor& scale);

}  // namespace ddp
