// defines: UsageError (bad flags, environment or files: exit 2), JoinError (rendezvous failed: exit 1)
// and SlurmError (sbatch or scontrol failed: exit 1).
#pragma once
#include <stdexcept>
#include <string>

namespace ddp {

// Exit codes shared by every program of the course.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // a run that started and failed: a check, a peer, a timeout
constexpr int kExitUsage = 2;    // refused before anything started: flags, environment, files
constexpr int kExitPreempted = 75;  // stopped on a preemption signal after a checkpoint: run again to
                                    // resume (sysexits' EX_TEMPFAIL); see Note [Preemption and requeue]

// Thrown for anything the user can fix by changing how the program is started.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown when processes could not form a group: a missing rank, an absent store, a busy port.
struct JoinError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown when Slurm's own tools (sbatch, scontrol) failed: their message is the cause, said as
// they said it (a "Socket timed out" of theirs is slurmctld's, not a peer rank's).
struct SlurmError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddp
