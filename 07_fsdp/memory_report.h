// defines: report_memory(): what this rank held, by kind, beside what the ZeRO paper's formulas
// say it should (Note [What each rank holds]).
#pragma once
#include <torch/torch.h>

#include "07_fsdp/fsdp.h"

namespace ch07 {

// Note [What each rank holds]
// The ZeRO paper (Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", section 5) counts a model of Ψ parameters in bytes per rank: 2Ψ of
// fp16 parameters, 2Ψ of fp16 gradients and KΨ of optimizer state (K = 12 for mixed-precision
// Adam): Ψ(2+2+K) under DDP. ZeRO-1 divides the K term by the world size N, ZeRO-2 the
// gradients' too, ZeRO-3 (FSDP) all three: Ψ(2+2+K)/N. This course trains in float32 with no
// master copy, so its terms are 4Ψ, 4Ψ and 4kΨ, k the state tensors per parameter (SGD with
// momentum 1, AdamW 2): FSDP 4Ψ(2+k)/N; a DDP whose buckets are its gradients 4Ψ(2+k) (PyTorch's
// gradient_as_bucket_view=True, 05's --gradient-as-bucket-view); 05's DDP as built, which keeps
// each gradient twice, in .grad() and in its bucket, 4Ψ(3+k). On top of the shards FSDP holds,
// for a while, the unit it is computing, whole: its parameters, and in backward their gradients,
// before the reduce-scatter cuts them; with --prefetch, the units gathered ahead too. The
// activations are the same as DDP's: sharding does not touch them.
// Where the MLP's peak is (the line "peak of the tensors ... allocated", counted from the model's
// construction on, a checkpoint's load included): in the reduce-scatter of the first unit, the
// last of backward, from the second step on (the optimizer's state exists from the first step).
// A model whose activations outweigh its first unit peaks earlier, while they are held: the
// CNN's comes in fc1's backward (exercise 07.1 asks why).
// Then a rank holds what 1/N divides (its shards: parameters, their gradients, the optimizer
// state; the reduce-scatter's output and the ring's receive buffer, each a chunk of the unit),
// and what it does not: the unit's whole gradient and the reduce-scatter's input (each the size
// of the unit, at any N), and the batch's images, which the training loop holds, and the epoch's
// order of the rank's samples (8 bytes an image of its share: 2 ranks over the 6400 images of
// the README's run hold 0.02 MiB of it, over all 60000 0.23 MiB; hence 7.88 MiB there and 8.09
// MiB in scripts/run.sh's run of all of them, for the same model and ranks). Autograd has freed
// the activations by then. For the MLP the first unit is fc1, three quarters of it: no N brings
// the peak below fc1 twice (3.07 MiB) and the batch beside it, about 3.3 MiB. A resume at another
// world may hold more while loading: its shard, state and an old file (Note [Sharded checkpoints]).

// Rank 0 logs its shards' elements and bytes (parameters, gradients, optimizer state) beside the
// formula, every rank the peak of the tensors counted since the model was built (Note [A memory limit
// on a CPU]); returns whether the optimizer state is k x this rank's rows (the check of step 7).
bool report_memory(const FullyShardedDataParallel& fsdp, const torch::optim::Optimizer& optimizer, int world);

}  // namespace ch07
