// defines: the preemption signal: caught as a flag, rehearsed with a drill, and the Slurm job requeued.
#pragma once
#include <string>

namespace ddp {

// Note [Preemption and requeue]
// A cluster stops a job at its time limit, or earlier to make room for another (preemption). Asked
// to, Slurm warns first: `#SBATCH --signal=USR2@90` sends SIGUSR2 to every task 90 s before the
// limit. What a trainer does with that warning, as submitit and Lightning do:
//   1. The handler only sets a flag: almost nothing is safe inside a signal handler, and a rank
//      stopped in the middle of a step would leave its peers waiting in an all-reduce.
//      (listen_for_preemption(), below.)
//   2. At the end of each step the ranks agree (an all-reduce of the flags): the signal reaches
//      them at slightly different instants, and all must stop after the same step. (StopVote,
//      stop_vote.h.)
//   3. A checkpoint is written after that step, so no step is lost, and none is repeated. (The
//      trainer's own checkpoint, chapter 05's, written when the vote says stop.)
//   4. Rank 0 asks Slurm to put the job back in the queue: `scontrol requeue $SLURM_JOB_ID`.
//   5. Every rank exits with kExitPreempted (75). The job runs again later with the same job id
//      and SLURM_RESTART_COUNT=1, and the trainer resumes from the checkpoint on its own.
//      (4 and 5: stop_for_requeue(), stop_vote.h.)
// Which signal: SIGUSR1 is Lightning's default, but NCCL may install its own SIGUSR1 handler,
// so submitit moved to SIGUSR2 (submitit#1709), and so do we; --requeue-signal changes it.
// Without --signal a job gets only SIGTERM at its limit, and SIGKILL KillWait seconds later:
// nothing warned it, so everything since its last checkpoint is lost.

// "USR2", "SIGUSR2" or "12" -> SIGUSR2. Only signals a scheduler sends for this are accepted
// (USR1, USR2, TERM, INT, HUP, CONT is not one); anything else is a UsageError.
int parse_signal(const std::string& name);
std::string signal_name(int sig);  // SIGUSR2 -> "SIGUSR2"

// Installs a handler for `sig` that only records that it came (and which signal).
void watch_for_preemption(int sig);
// Both: parses the trainer's --requeue-signal (UsageError if it is not a scheduler's signal) and
// watches for it. Call it before joining: a signal that comes then is not fatal. Returns it.
int listen_for_preemption(const std::string& signal);
// The signal received since watch_for_preemption(), or 0.
int preemption_signal();

// The laptop drill: this process sends itself `sig` after `after_s` seconds, as Slurm would.
void drill_preemption(int sig, double after_s);

// Rank 0's step 4: `scontrol requeue <job_id>`, at most `timeout_s`. Throws std::runtime_error
// with scontrol's own words when it fails (no scontrol, job not requeueable, ...).
void requeue_slurm_job(const std::string& job_id, double timeout_s);

}  // namespace ddp
