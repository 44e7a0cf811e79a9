// defines: fp16_compress_hook and bf16_compress_hook, PyTorch's communication hooks that halve
// the bytes on the wire (going_further/comm_hooks.md). Handed to the DDP class with
// register_comm_hook(), as in Python: ddp_model.register_comm_hook(None, fp16_compress_hook).
#pragma once
#include <torch/torch.h>

#include "05_ddp/ddp.h"
#include "common/group/process_group.h"

namespace ddp {

// Cast the bucket to `type` (kHalf or kBFloat16), divide it by the world size there, all-reduce
// that, and copy the result back into the float32 bucket (Note [Communication hooks]). Throws
// UsageError where `group`'s backend cannot all-reduce `type`.
CommHook compress_hook(Group& group, torch::ScalarType type);

}  // namespace ddp
