// defines: StopVote, by which every rank stops after the same step once one has the warning
// signal, and stop_for_requeue(), the exit 75 and `scontrol requeue` that follow the checkpoint.
// Steps 2, 4 and 5 of Note [Preemption and requeue] (preemption.cpp); stop_vote.cpp is the lesson.
#pragma once
#include <cstdint>
#include <memory>

#include "common/group/process_group.h"

namespace ddp {

// A vote each step that costs no host sync: Note [Stopping together without a sync per step].
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
