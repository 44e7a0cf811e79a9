// defines: the trainer's side of a preemption: the signal listened for, the drills, the stop vote
// and the requeue. Preemption is chapter 06's lesson (Note [Preemption and requeue] in
// common/slurm/preemption.h, and 06_slurm/README.md); chapter 05 only carries it.
#pragma once
#include <memory>

#include "05_ddp/trainer/options.h"
#include "common/group/process_group.h"

namespace ddp {

// Parses --requeue-signal (UsageError if it is not a scheduler's signal) and installs the
// handler that only records that it came. Call it before joining: a signal then is not fatal.
// Returns the signal.
int listen_for_preemption(const TrainerOptions& o);

// Note [Stopping together without a sync per step]
// A preemption signal reaches the ranks at different moments, yet all must stop after the same
// step, or their collectives no longer pair up. A blocking vote each step (all-reduce MAX of a
// flag, then read it) does that, but on a GPU reading the result waits for the whole step to
// finish: one host sync per step, for a signal that comes once a job. So each step posts its
// flag in an all-reduce that runs in the background, and reads the vote posted one step
// earlier, which has finished by then (on a GPU its result is copied to pinned host memory
// behind it, and only that copy is waited for, not the step in flight). Every rank reads the
// same vote at the same step: all stop together, one step later than a blocking vote would,
// well inside the scheduler's warning time (90-120 s).
class StopVote {
 public:
  explicit StopVote(Group& group);
  ~StopVote();  // waits for a vote still in flight: the group must not be left with it
  // Reads the vote posted by the previous call (false if none); unless it says stop, posts
  // `mine` when `post` is true. Returns true when some rank had raised its flag.
  bool next(bool mine, bool post);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// After a preemption signal and its checkpoint at `step`: rank 0 requeues the Slurm job (when
// there is one), and every rank returns kExitPreempted. See Note [Preemption and requeue].
int stop_for_requeue(Group& group, int64_t step, int sig);

}  // namespace ddp
