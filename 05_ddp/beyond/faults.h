// defines: Faults: --kill-rank, --straggle-rank and --skip-rank, faults injected into the trainer
// for real, to watch what the other ranks say (Note [Faults injected into the trainer]).
#pragma once
#include <cstdint>

#include <memory>

#include "05_ddp/ddp.h"
#include "05_ddp/trainer/options.h"
#include "common/group/process_group.h"

namespace ddp {

// Note [Faults injected into the trainer]
// A distributed run fails in a few typical ways, and each should be recognised from what the
// surviving ranks print (Note [Flight recorder]): a rank that dies (--kill-rank R --kill-at-step
// N: SIGKILL after step N; with --kill-node its launcher too, as when a node dies), a rank that
// is slow (--straggle-rank R --straggle-ms M before every step), and a rank whose collectives no
// longer match the others' (--skip-rank R --skip-at-step N: it does not start bucket 0's
// all-reduce). They fire in a run's first attempt only: after a restart (TORCHELASTIC_RESTART_COUNT
// > 0, set by 02_spawn and torchrun) the run is meant to finish, which is how the tests show a
// restarted run ending as an uninterrupted one. The skipped all-reduce is a comm hook that wraps
// the registered one on the faulty rank, as a bug of that rank's hook would: the DDP class does
// not know about faults. (Without another hook it divides after the copy instead of during it,
// as PyTorch's allreduce_hook does: the same quotients, element by element.)
class Faults {
 public:
  // Checks the flags (UsageError: a flag without its partner, a rank outside the world).
  Faults(const TrainerOptions& o, int rank, int world);
  // --skip-rank: on that rank, a comm hook around the registered one. Before the first backward.
  void attach(DistributedDataParallel& ddp, Group& group);
  void before_step(int64_t step);  // straggle; arm the skipped all-reduce
  void after_step(int64_t step) const;  // kill

 private:
  const TrainerOptions& o_;
  int rank_;
  bool first_attempt_;
  std::shared_ptr<bool> skip_next_ = std::make_shared<bool>(false);
};

}  // namespace ddp
