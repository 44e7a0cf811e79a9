// defines: the trainer's plumbing: the optimizer by flag, and --nproc-per-node (re-running this
// program under chapter 02's launcher).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "05_ddp/trainer/options.h"
#include "common/basics/cli.h"

namespace ddp {

// SGD with momentum, or AdamW, as --optimizer says.
std::unique_ptr<torch::optim::Optimizer> make_trainer_optimizer(const std::vector<torch::Tensor>& params,
                                                                const TrainerOptions& o);

int64_t count_parameters(const std::vector<torch::Tensor>& params);

// --nproc-per-node N: replaces this process with `02_spawn --nproc-per-node N -- <this program>
// <the same flags>`; chapter 02's launcher forks the ranks, watches them and reports failures.
int relaunch_with_02_spawn(int argc, char** argv, int nproc, const CommonFlags& flags, const TrainerOptions& o);

}  // namespace ddp
