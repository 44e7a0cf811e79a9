// defines: StopVote, by which every rank stops after the same step once one has the warning
// signal, and stop_for_requeue(), the exit 75 and `scontrol requeue` that follow the checkpoint.
// Steps 2, 4 and 5 of Note [Preemption and requeue] (preemption.h); chapter 06's lesson.
#pragma once
#include <cstdint>
#include <memory>

#include "common/group/process_group.h"

namespace ddp {

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
