// defines: AdamW, LibTorch's AdamW stepping as Python's torch.optim.AdamW of the same version.
#pragma once
#include <torch/torch.h>

namespace ddp {

// Note [AdamW as Python steps it]
// LibTorch's C++ AdamW moves the first moment as exp_avg * beta1 + grad * (1 - beta1); Python's
// AdamW does so in 1.13 but since 2.0 with exp_avg.lerp_(grad, 1 - beta1), and takes the bias
// correction's root as a power (** 0.5) where 1.13 took math.sqrt. The same formula, rounded
// otherwise: LibTorch 2.11's AdamW ended 7.45e-08 from Python's after 40 steps. This class is
// LibTorch's AdamW (its options, its state, its checkpoints) with the step of Python's
// single-tensor loop of the same version, op for op, so that the parity tests hold it bit for
// bit in both flavours: 05's against DistributedDataParallel, 07's against fully_shard.
class AdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddp
