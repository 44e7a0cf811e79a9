// provides: chapter 06's lesson, first half: Note [Preemption and requeue], the path a warned job
// takes; its step 1, the signal caught as a flag; the drill; step 4, rank 0's `scontrol requeue`.
#include "common/slurm/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/launch/command.h"

namespace ddp {

// Note [Preemption and requeue]
// A cluster stops a job at its time limit, or earlier to make room for another (preemption). Asked
// to, Slurm warns first: `#SBATCH --signal=USR2@90` sends SIGUSR2 to every task 90 s before the
// limit. What a trainer does with that warning, as submitit and Lightning do:
//   1. The handler only sets a flag: almost nothing is safe inside a signal handler, and a rank
//      stopped in the middle of a step would leave its peers waiting in an all-reduce.
//      (listen_for_preemption(), below.)
//   2. The ranks agree on a step to stop after (an all-reduce of the flags): the signal reaches
//      them at slightly different instants, and all must stop after the same step. Each step
//      posts its flag without waiting and reads the vote of the step before, so they stop one
//      step after the one the signal came in. (StopVote, stop_vote.cpp.)
//   3. A checkpoint is written after that step, so no step is lost, and none is repeated. (The
//      trainer's own checkpoint, chapter 05's, written when the vote says stop.)
//   4. Rank 0 asks Slurm to put the job back in the queue: `scontrol requeue $SLURM_JOB_ID`.
//   5. Every rank exits with kExitPreempted (75). The job runs again later with the same job id
//      and SLURM_RESTART_COUNT=1, and the trainer resumes from the checkpoint on its own.
//      (4 and 5: stop_for_requeue(), stop_vote.cpp.)
// Which signal: SIGUSR1 is Lightning's default, but NCCL may install its own SIGUSR1 handler,
// so submitit moved to SIGUSR2, and so do we; --requeue-signal changes it.
// Without --signal a job gets only SIGTERM at its limit, and SIGKILL KillWait seconds later:
// nothing warned it, so everything since its last checkpoint is lost.
namespace {

std::atomic<int> g_received{0};  // lock-free: the one thing a handler may touch

void on_signal(int sig) { g_received.store(sig); }

}  // namespace

// Step 1: the handler only sets a flag; the trainer reads it between steps (preemption_signal()).
void watch_for_preemption(int sig) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (a socket read in Gloo) carry on
  ::sigaction(sig, &sa, nullptr);
}

// Called before joining: a signal that comes while the ranks meet is then a flag, not the end.
int listen_for_preemption(const std::string& signal) {
  const int sig = parse_signal(signal);  // signals.h: USR2, SIGUSR2 or 12
  watch_for_preemption(sig);
  return sig;
}

int preemption_signal() { return g_received.load(); }

// The drill: the signal comes from this process instead of Slurm; the rest of the path is the same.
void drill_preemption(int sig, double after_s) {
  std::thread([sig, after_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
    ::kill(::getpid(), sig);
  }).detach();
}

// Step 4, on rank 0 once the checkpoint is written (stop_for_requeue(), stop_vote.cpp).
void requeue_slurm_job(const std::string& job_id, double timeout_s) {
  const std::vector<std::string> cmd{"scontrol", "requeue", job_id};
  const CommandResult r = run_command(cmd, timeout_s);
  if (r.exit_code == 0) return;
  std::string why = !r.started ? "scontrol is not on PATH" : r.timed_out ? "no answer within " + std::to_string(timeout_s) + " s"
                                                                          : "exit " + std::to_string(r.exit_code);
  throw std::runtime_error("'" + command_line(cmd) + "' failed (" + why + "): " + r.output +
                           " The checkpoint is written: submit the job again to resume from it");
}

}  // namespace ddp
