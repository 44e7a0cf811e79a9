// defines: local SGD and DiLoCo on chapter 08's machinery: replicas step alone, and every H steps
// average their parameters (local SGD) or their progress, for an outer optimizer (DiLoCo).
#pragma once
#include <torch/torch.h>

#include <functional>

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
// member said yes; returns the vote. `hit` is called with "allreduce" after the all-reduce and
// with "vote" after the vote (where --fault allreduce and vote strike).
using FaultPoint = std::function<void(const char*)>;
bool sync_parameters(ddp::Backend& pg, std::vector<torch::Tensor>& params, bool contributes, int contributors,
                     const FaultPoint& hit = {});

// Note [DiLoCo]
// ~~~~~~~~~~~~~
// `--sync-every H --outer-lr L`: as local SGD, each replica steps its own (inner) optimizer, but
// what is averaged is each replica's progress since the last sync, the pseudo-gradient
// global - params, and the new global parameters come from an outer optimizer stepped on that
// average (SGD with Nesterov momentum, --outer-momentum: the DiLoCo paper's, arXiv 2311.08105).
// With L = 1 and no momentum the outer step lands on the replicas' average (in exact arithmetic),
// as local SGD's does, but taken after steps H-1, 2H-1, ... rather than 0, H, 2H, .... The order is
// torchft's DiLoCo (torchft/local_sgd.py, _StreamingDiLoCoFragment.prepare_sync and
// perform_sync, the whole model one fragment, synced without delay: its plain DiLoCo): after the inner steps of steps H-1, 2H-1, ... the
// pseudo-gradients are all-reduced (summed, then divided by the contributors: Manager.allreduce),
// the parameters are set back to the global ones, and if every member of the quorum votes yes
// (torchft's vote spans one replica group: Note [Zeros until healed, and a vote]) the outer
// optimizer steps with the average as the gradient and its result becomes the new global; if
// not, the parameters stay at the global ones: the inner steps since the last sync are thrown
// away, on every member. The inner optimizer's state (momentum) is kept across syncs, as
// torchft keeps it. Healing copies the global parameters and the outer optimizer's state too.
// The outer optimizer's settings: --outer-lr (0: not DiLoCo) and --outer-momentum.
struct Outer {
  double lr = 0;
  double momentum = 0.9;
};
// Each replica's DiLoCo state: the global parameters and the outer optimizer over the model's.
struct Diloco {
  std::vector<torch::Tensor> global;
  std::unique_ptr<torch::optim::Optimizer> outer;
};
// An empty one (no outer optimizer) if outer.lr is 0.
Diloco make_diloco(std::vector<torch::Tensor>& params, const Outer& outer);
// The outer step on `avg` (the averaged pseudo-gradient, flat): params <- global, grad <- avg,
// outer.step(), global <- params. Shared by the replicas and the launcher's replay.
void outer_step(Diloco& d, std::vector<torch::Tensor>& params, const torch::Tensor& avg);
// global - params, flat: this replica's pseudo-gradient.
torch::Tensor pseudo_gradient(const Diloco& d, const std::vector<torch::Tensor>& params);
// The sync: the average, the vote, and the outer step if every member said yes; returns the vote.
// `hit` as for sync_parameters.
bool sync_diloco(ddp::Backend& pg, Diloco& d, std::vector<torch::Tensor>& params, bool contributes, int contributors,
                 const FaultPoint& hit = {});
// A sync that failed: params <- global, the inner steps since the last sync thrown away.
void discard_local_steps(const Diloco& d, std::vector<torch::Tensor>& params);

}  // namespace ch08
