// defines: evaluate(): the test set's loss and accuracy over all ranks, each image counted once
// (Note [Exact distributed validation]).
#pragma once
#include <torch/torch.h>

#include "05_ddp/ddp.h"
#include "05_ddp/trainer/metrics.h"
#include "05_ddp/models.h"
#include "common/data/fashion_mnist.h"
#include "common/group/process_group.h"

namespace ddp {

// Note [Exact distributed validation]
// The sampler pads the test set so every rank gets the same number of images: with 10000
// images and 3 ranks, 2 images are seen twice. Each rank sums loss and hits over its shard,
// leaving out the padding, and one all-reduce adds the sums: the result is what one process
// gets on the whole test set, image for image: the same hits of the same 10000 images; the
// mean loss to float32 precision. Every rank evaluates
// rank 0's model: BatchNorm's running statistics are broadcast first (Note [Buffers]).
Evaluation evaluate(const AnyModel& model, DistributedDataParallel& ddp_model, const Dataset& test, Group& group, int batch,
                    const torch::Device& device);
// The same for a model whose ranks hold what they should already (no buffers to broadcast):
// chapter 07's, whose forward gathers its parameters.
Evaluation evaluate(const AnyModel& model, const Dataset& test, Group& group, int batch, const torch::Device& device);

}  // namespace ddp
