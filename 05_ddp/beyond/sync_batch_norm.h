// defines: sync_batch_norm(): BatchNorm whose statistics are those of all ranks' batches together.
#pragma once
#include <torch/torch.h>

#include "05_ddp/models.h"
#include "common/group/process_group.h"

namespace ddp {

// SyncBatchNorm over `group` (Note [SyncBatchNorm]), as the model's way to normalise: in
// training, every rank normalises with the mean and variance of the union of all ranks'
// batches, and the running statistics follow those. In eval mode, and in a world of one, it is
// plain BatchNorm, as PyTorch's SyncBatchNorm. The layers' parameters and buffers are the
// BatchNorm2d modules' own: checkpoints are the same with and without it.
Normalise sync_batch_norm(Group& group);

}  // namespace ddp
