// defines: submit() and follow(): the submitter's side of a real Slurm, through sbatch and
// scontrol. See Note [Submitting and following a job].
#pragma once
#include <string>

#include "06_slurm/job.h"

namespace ddp {

// `sbatch --parsable <script>`: returns the job id. UsageError when sbatch is not on PATH.
std::string submit(const std::string& script_path, double timeout_s);

// Prints rank 0's log as it grows and every change of the job's state until the job ends, then
// says how it ended. Returns 0 when it COMPLETED, 1 otherwise.
int follow(const JobSpec& j, const std::string& id, double timeout_s);

}  // namespace ddp
