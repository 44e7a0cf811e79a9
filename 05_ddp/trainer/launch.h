// defines: fork_ranks(), --nproc-per-node: chapter 02's launcher, linked into this program,
// forks the ranks from this process, and each child runs one rank's code.
#pragma once
#include <functional>

#include "05_ddp/trainer/options.h"
#include "common/basics/cli.h"

namespace ddp {

// --nproc-per-node N: runs chapter 02's launcher as `02_spawn --nproc-per-node N -- <this
// program> <the same flags>` would, but in this process: it forks the ranks, watches them and
// reports failures, and each child runs `one_rank` (steps 1-7 of main.cpp) with torchrun's
// variables set, instead of starting this program again (Note [The worker in place],
// 02_spawn/exec_worker.cpp). Returns the launcher's exit code.
int fork_ranks(int argc, char** argv, const CommonFlags& flags, TrainerOptions& o, const std::function<int()>& one_rank);

}  // namespace ddp
