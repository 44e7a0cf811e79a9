// defines: run_local(): a Slurm job run on this machine, with the environment Slurm would give
// its tasks, its time limit, warning signal and requeue; and the stand-ins for scontrol and srun.
#pragma once
#include "06_slurm/job.h"

namespace ddp {

// Runs `spec` as Slurm would, on this machine: --nodes x --tasks-per-node tasks, each with
// SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_NNODES, SLURM_JOB_NODELIST,
// SLURM_STEP_NODELIST, SLURM_TASKS_PER_NODE, SLURM_JOB_ID, SLURM_STEP_ID and, after a requeue,
// SLURM_RESTART_COUNT. See Note [The simulated cluster]. Returns 0 when the job COMPLETED.
int run_local(const JobSpec& spec);

// 06_slurm started under the name `scontrol` (run_local puts such a link first on the tasks'
// PATH): `scontrol requeue <job id>` asks run_local to requeue; anything else is refused.
int local_scontrol(int argc, char** argv);

// 06_slurm started under the name `srun` (the same folder): a job step of --local --batch's job, its
// tasks with the step's variables (Note [A batch script in the simulated cluster]).
int local_srun(int argc, char** argv);

}  // namespace ddp
