// defines: split_global_batch(): --global-batch, the per-rank batch that follows the world size,
// so that a run can resume at another world size (Note [Resuming at another world size]).
#pragma once
#include "05_ddp/trainer/options.h"

namespace ddp {

// Note [Resuming at another world size]
// DistributedSampler gives rank r the indices r, r+W, r+2W, ... of the epoch's (padded)
// permutation, and each rank takes them b at a time: global step k therefore consumes the block
// of G = W·b·accumulation indices starting at k·G, whatever W is. A checkpoint's step is a
// position in the data that any world size reaches, as long as G (and so the steps per epoch)
// stays the same: 2 ranks of 32 and 4 ranks of 16 see the same 64 images at step k. What
// differs is the order of floating-point sums, and the padding of an epoch's last step. So a
// resume may change the world size but not the global batch: --global-batch keeps it fixed
// while the per-rank batch follows the world (resume.cpp refuses the rest, naming the numbers).
// This is what elastic training needs: torchrun --nnodes 1:2 restarts the survivors of a lost
// node at a smaller world, and they continue at the same step with the same samples.

// With --global-batch: sets batch_size to global / (world x grad_accum), or throws UsageError
// naming the numbers when that does not divide. Logs the split either way. Without: nothing.
void split_global_batch(TrainerOptions& o, int world);

}  // namespace ddp
