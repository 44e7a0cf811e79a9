// defines: apply_ddp_flags(): the DDP class's features past the chapter's lesson, each behind its
// flag and each a page of 05_ddp/going_further/: --comm-hook (comm_hooks.md),
// --gradient-as-bucket-view (gradient_as_bucket_view.md), --find-unused-parameters
// (unused_parameters.md).
#pragma once
#include "05_ddp/ddp.h"
#include "05_ddp/models.h"
#include "05_ddp/trainer/options.h"

namespace ddp {

// What PyTorch passes to DistributedDataParallel's constructor, or registers on it before the
// first backward. With --find-unused-parameters, model.forward also does what PyTorch's DDP
// forward does after the module's: prepare_for_backward(output). Throws UsageError for a
// flag the run cannot apply.
void apply_ddp_flags(DistributedDataParallel& ddp, AnyModel& model, Group& group, const TrainerOptions& o);

}  // namespace ddp
