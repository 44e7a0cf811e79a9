// provides: split_global_batch(). See Note [Resuming at another world size].
#include "05_ddp/beyond/elastic.h"

#include <cstdint>
#include <string>

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

void split_global_batch(TrainerOptions& o, int world) {
  if (!o.global_batch) return;
  const int64_t per_step = static_cast<int64_t>(world) * o.grad_accum;
  if (*o.global_batch % per_step != 0) {
    throw UsageError("--global-batch " + std::to_string(*o.global_batch) + " does not divide into " + std::to_string(world) +
                     " ranks x " + std::to_string(o.grad_accum) + " micro-batches (--grad-accum): choose a multiple of " +
                     std::to_string(per_step));
  }
  o.batch_size = static_cast<int>(*o.global_batch / per_step);
  log0("global batch " + std::to_string(*o.global_batch) + " = " + std::to_string(world) + (world == 1 ? " rank x " : " ranks x ") +
       std::to_string(o.batch_size) +
       " images x " + std::to_string(o.grad_accum) + " micro-batch(es)");
}

}  // namespace ddp
