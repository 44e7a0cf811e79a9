// defines: local SGD on chapter 08's machinery: replicas step alone and average their parameters
// every H steps.
#pragma once
#include <torch/torch.h>

#include "common/group/compat.h"

namespace ch08 {

// Note [Local SGD]
// ~~~~~~~~~~~~~~~~
// `--sync-every H`: no gradient is all-reduced. Each contributor steps its own optimizer on its
// own slice's gradient, and after the optimizer steps of steps 0, H, 2H, ... the replicas
// average their parameters: one all-reduce of all of them, flat, every H steps instead of one of
// the gradients every step (the bytes: H times fewer). PyTorch's PostLocalSGDOptimizer with a
// PeriodicModelAverager(period=H, warmup_steps=0) does the same, in this order
// (torch/distributed/algorithms/model_averaging/averagers.py, PeriodicModelAverager.
// average_parameters, and utils.py, average_parameters: the parameters concatenated, divided by
// the group's size, then summed, and copied back); the optimizers' own state (momentum) is not
// averaged. Here the divisor is the contributors (a member still healing sends zeros, as in
// Note [Zeros until healed, and a vote]), and the average is copied back only if every member's
// all-reduce succeeded: a failed average leaves each replica its own parameters, and the next
// quorum averages at the next sync. torchft's LocalSGD (torchft/local_sgd.py) asks for a quorum
// at each sync only; ours asks at every step, as the rest of the chapter does.
// The average, the vote on it, and the average copied back into `params` (in place) if every
// member said yes; returns the vote.
bool sync_parameters(ddp::Backend& pg, std::vector<torch::Tensor>& params, bool contributes, int contributors);

}  // namespace ch08
