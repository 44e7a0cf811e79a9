// defines: the trainer's plumbing: optimizer by flag, checkpoint save/resume across ranks, and
// --nproc-per-node (re-running this program under chapter 02's launcher).
#pragma once
#include <torch/torch.h>

#include "05_ddp/options.h"
#include "common/cli.h"
#include "common/process_group.h"

namespace ddp {

// SGD with momentum, or AdamW, as --optimizer says.
std::unique_ptr<torch::optim::Optimizer> make_trainer_optimizer(const std::vector<torch::Tensor>& params,
                                                                const TrainerOptions& o);

int64_t count_parameters(const std::vector<torch::Tensor>& params);

// Rank 0 writes model, optimizer, step and RNG state to `dir` (atomically, keeping `keep`);
// then a barrier, so that no rank runs ahead of a checkpoint that may still fail.
void checkpoint(const std::string& dir, int64_t step, int keep, torch::nn::Module& model, torch::optim::Optimizer& opt,
                Group& group);

// Every rank loads the newest readable checkpoint of `dir` onto its own device; the ranks then
// check that they all resumed at the same step. Returns the step to continue from (0: none).
int64_t resume(const std::string& dir, const torch::Device& device, torch::nn::Module& model, torch::optim::Optimizer& opt,
               Group& group);

// --nproc-per-node N: replaces this process with `02_spawn --nproc-per-node N -- <this program>
// <the same flags>`; chapter 02's launcher forks the ranks, watches them and reports failures.
int relaunch_with_02_spawn(int argc, char** argv, int nproc, const CommonFlags& flags);

}  // namespace ddp
