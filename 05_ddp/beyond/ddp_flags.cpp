// provides: apply_ddp_flags(): --comm-hook (and PowerSGD's options), --gradient-as-bucket-view
// and --find-unused-parameters onto the DDP class.
#include "05_ddp/beyond/ddp_flags.h"

#include "05_ddp/beyond/comm_hooks.h"
#include "05_ddp/beyond/gradient_as_bucket_view.h"
#include "05_ddp/beyond/powersgd.h"
#include "05_ddp/beyond/unused_parameters.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

void apply_ddp_flags(DistributedDataParallel& ddp, AnyModel& model, Group& group, const TrainerOptions& o) {
  if (o.comm_hook != "powersgd" && (o.powersgd_rank || o.powersgd_start_iter)) {
    throw UsageError("--powersgd-rank and --powersgd-start-iter need --comm-hook powersgd");
  }
  // What travels on the wire: Note [Communication hooks], Note [PowerSGD].
  if (o.comm_hook == "fp16") ddp.register_comm_hook(compress_hook(group, torch::kHalf));
  else if (o.comm_hook == "bf16") ddp.register_comm_hook(compress_hook(group, torch::kBFloat16));
  else if (o.comm_hook == "powersgd") {
    PowerSgdOptions powersgd;
    if (o.powersgd_rank) powersgd.rank = *o.powersgd_rank;
    if (o.powersgd_start_iter) powersgd.start_iter = *o.powersgd_start_iter;
    ddp.register_comm_hook(powersgd_hook(group, powersgd, ddp.parameters()));
  } else if (o.comm_hook != "none") {
    throw UsageError("--comm-hook " + o.comm_hook + ": use none, fp16, bf16 or powersgd");
  }
  if (o.comm_hook != "none") log0("comm hook: each bucket compressed to " + o.comm_hook + " on the wire");
  // The reducer's own options (Note [Reducer options]).
  if (o.gradient_as_bucket_view && o.find_unused_parameters) {
    throw UsageError("--find-unused-parameters with --gradient-as-bucket-view: not both in this course (PyTorch allows it)");
  }
  if (o.gradient_as_bucket_view) ddp.set_reducer_option(std::make_unique<GradientAsBucketView>(ddp));
  if (o.find_unused_parameters) {
    auto unused = std::make_unique<FindUnusedParameters>(ddp);  // Note [Unused parameters]
    model.forward = [forward = model.forward, &option = *unused](const torch::Tensor& x) {
      torch::Tensor output = forward(x);
      option.prepare_for_backward(output);
      return output;
    };
    ddp.set_reducer_option(std::move(unused));
  }
}

}  // namespace ddp
