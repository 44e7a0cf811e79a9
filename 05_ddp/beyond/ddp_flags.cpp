// provides: apply_ddp_flags(): --comm-hook and --gradient-as-bucket-view onto the DDP class.
#include "05_ddp/beyond/ddp_flags.h"

namespace ddp {

void apply_ddp_flags(DistributedDataParallel& ddp, const TrainerOptions& o) {
  ddp.register_comm_hook(parse_comm_hook(o.comm_hook));            // Note [Communication hooks]
  ddp.set_gradient_as_bucket_view(o.gradient_as_bucket_view);  // Note [Gradients as bucket views]
}

}  // namespace ddp
