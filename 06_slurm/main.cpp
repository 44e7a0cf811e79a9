// 06_slurm: chapter 05's trainer as a Slurm job: the batch script, one task per rank, the
// warning signal before the time limit, and the requeue that resumes from a checkpoint.
//
// This program writes the batch script and submits and follows it; --local runs the same job here
// as Slurm would, preemption and requeue included, without a cluster. The trainer's side of
// preemption, the lesson's other half, is in common/slurm/ (README.md says what to read).
//
// Usage:
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2                       # print the batch script
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2 --submit --follow -- --max-steps 300
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 -- --max-steps 300   # no Slurm needed
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 --time 0:40 --signal USR2@30 -- --epochs 1
//   ./build-cpu/06_slurm --local --batch 08_fault_tolerance/replicas.sbatch -- --steps 400   # a batch script of its own
//   ./build-cuda/06_slurm --nodes 2 --gpus-per-node 4 --partition gpu --time 4:00:00 --submit
//
// Expected output (--local --nodes 2 --tasks-per-node 2 -- --max-steps 300 --log-every 100 --drill-at-step 120;
// trimmed; the drill sends the trainer the warning signal after step 120, as Slurm would before the limit):
//   [slurm (local)] simulated Slurm: job 1811 (ddp), 2 node(s) x 2 task(s); trainer output in /home/you/ddp-course/runs/06_slurm/1811
//   [slurm (local)] job 1811 running: 4 tasks on 127.0.0.[1-2], tasks per node 2(x2), time limit 30:00, USR2 90 s before it
//   [rank 0/4] preempted: SIGUSR2 received; stopped after step 121 with its checkpoint written; requeueing Slurm job 1811 (restart 0)
//   [slurm (local)] job 1811 requeued: starting again in 2s with SLURM_RESTART_COUNT=1
//   [slurm (local)] job 1811 (restart 1) running: 4 tasks on 127.0.0.[1-2], tasks per node 2(x2), time limit 30:00, USR2 90 s before it
//   [rank 0/4] resumed from /home/you/ddp-course/runs/06_slurm/1811/checkpoints/ckpt-000000121.pt at step 121 (--reset starts over)
//   [rank 0/4] params fingerprint f409279389ac72f0 (bit-identical runs print the same)
//   [slurm (local)] job 1811 ended: COMPLETED after 1 requeue(s)

#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "06_slurm/job.h"
#include "06_slurm/local_cluster.h"
#include "06_slurm/submit.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"

std::string batch_script(const ddp::JobSpec& j);  // step 2, below main

int main(int argc, char** argv) {
  // Under the name `scontrol`, this program is the stand-in that --local puts on the tasks' PATH.
  const char* base = std::strrchr(argv[0], '/');
  if (std::strcmp(base ? base + 1 : argv[0], "scontrol") == 0) return ddp::local_scontrol(argc, argv);
  if (std::strcmp(base ? base + 1 : argv[0], "srun") == 0) return ddp::local_srun(argc, argv);  // and under `srun`, with --batch

  return ddp::guarded_main([&] {
    // 1. The plan: the flags, read and checked before anything is written or submitted (job.cpp).
    const ddp::Plan p = ddp::read_plan(argc, argv);
    const std::string script = batch_script(p.job);  // 2.
    // 3. With --local: the same job on this machine, as Slurm would run it (Note [The simulated cluster]);
    //    the simulator gives the tasks what the script's #SBATCH lines ask for.
    if (p.local) return ddp::run_local(p.job);

    // 4. Print or write the script; submit it with sbatch and follow it (Note [Submitting and following a job]).
    if (p.script_out.empty()) return std::cout << script, ddp::kExitOk;
    std::ofstream(p.script_out) << script;
    if (!p.submit) return ddp::log("batch script written: " + p.script_out), ddp::kExitOk;
    const std::string id = ddp::submit(p.script_out, p.timeout_s);
    ddp::log("submitted job " + id + " (" + p.script_out + "); its log: " + p.job.out_dir + "/" + p.job.name + "-" + id + ".out");
    return p.follow ? ddp::follow(p.job, id, p.timeout_s) : ddp::kExitOk;
  });
}

// 2. The batch script. sbatch reads the #SBATCH lines (they must come before the first command),
//    then runs the rest on the first node of the allocation; `srun` there starts the tasks.
std::string batch_script(const ddp::JobSpec& j) {
  std::ostringstream s;
  auto line = [&](const std::string& option, const std::string& why) {
    s << "#SBATCH " << option << std::string(option.size() < 32 ? 32 - option.size() : 1, ' ') << "# " << why << "\n";
  };
  s << "#!/bin/bash\n# Written by 06_slurm: chapter 05's trainer as a Slurm job.\n";
  line("--job-name=" + j.name, "the name squeue shows; %x in --output");
  line("--nodes=" + std::to_string(j.nodes), "machines");
  if (j.gpus_per_node > 0) line("--gpus-per-node=" + std::to_string(j.gpus_per_node), "GPUs on each machine");
  line("--ntasks-per-node=" + std::to_string(j.tasks_per_node),
       j.gpus_per_node ? "one task (rank) per GPU: world size " + std::to_string(j.world())
                       : "tasks (ranks) on each machine: world size " + std::to_string(j.world()));
  line("--cpus-per-task=" + std::to_string(j.cpus_per_task), "cores for each rank");
  if (!j.partition.empty()) line("--partition=" + j.partition, "the queue to run in");
  if (!j.nodelist.empty()) line("--nodelist=" + j.nodelist, "exactly these machines");
  line("--time=" + j.time, "the time limit; the job is killed at it");
  if (!j.no_signal) {
    line("--signal=" + j.signal + "@" + std::to_string(j.signal_before_s),
         "SIG" + j.signal + " to every task " + std::to_string(j.signal_before_s) + " s before the limit: checkpoint, requeue");
    line("--requeue", "allow `scontrol requeue` to put the job back in the queue");
  }
  line("--open-mode=append", "a requeued run appends to the log instead of truncating it");
  line("--chdir=" + j.submit_dir, "where the job runs");
  line("--output=" + j.out_dir + "/%x-%j.out", "the job's log (%x name, %j job id)");
  for (const auto& extra : j.extra_lines) line(extra, "given with --sbatch");
  s << "set -euo pipefail\n"
    << "if [ -z \"${SLURM_JOB_ID:-}\" ]; then echo \"$0: a Slurm batch script: submit it with sbatch\" >&2; exit 2; fi\n"
    << "echo \"job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST, tasks per node $SLURM_TASKS_PER_NODE\"\n"
    << "# One task per rank: each reads its rank and rank 0's address from Slurm's variables.\n"
    << "srun";
  for (const auto& word : j.task_command("$SLURM_JOB_ID")) {
    s << " " << (word.find_first_of(" \"'") == std::string::npos ? word : "'" + word + "'");
  }
  s << "\n";
  return s.str();
}
