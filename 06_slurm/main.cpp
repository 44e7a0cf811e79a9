// 06_slurm: chapter 05's trainer as a Slurm job: the batch script, one task per rank, the
// warning signal before the time limit, and the requeue that resumes from a checkpoint.
//
// The lesson: what a Slurm job of a DDP trainer is made of. This program reads a few flags and
// checks the plan (step 1), writes the batch script, every #SBATCH line saying why it is there (2),
// and submits it with sbatch and follows rank 0's log to the end (4; submit.cpp). With --local it
// runs the same job on this machine, with the environment Slurm would give each task (3;
// local_cluster.cpp), so the whole path, preemption and requeue included, can be watched without a
// cluster. The trainer's side of preemption, the lesson's other half: common/slurm/preemption.h,
// then common/slurm/stop_vote.h (README.md says in which order).
//
// Usage:
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2                       # print the batch script
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2 --submit --follow -- --max-steps 300
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 -- --max-steps 300   # no Slurm needed
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 --time 0:40 --signal USR2@30 -- --epochs 1
//   ./build-cuda/06_slurm --nodes 2 --gpus-per-node 4 --partition gpu --time 4:00:00 --submit
//
// Expected output (--local --nodes 2 --tasks-per-node 2 -- --max-steps 300 --log-every 100 --drill-at-step 120;
// trimmed; the drill sends the trainer the warning signal after step 120, as Slurm would before the limit):
//   [slurm (local)] simulated Slurm: job 1811 (ddp), 2 node(s) x 2 task(s); trainer output in /home/you/ddp-course/runs/06_slurm/1811
//   [slurm (local)] job 1811 running: 4 tasks on 127.0.0.[1-2], tasks per node 2(x2), time limit 30:00, USR2 90 s before it
//   [rank 0/4] preempted: SIGUSR2 received; stopped after step 121 with its checkpoint written; requeueing Slurm job 1811 (restart 0)
//   [slurm (local)] job 1811: requeue requested (scontrol requeue): stopping its tasks
//   [slurm (local)] job 1811 requeued: starting again in 2s with SLURM_RESTART_COUNT=1
//   [slurm (local)] job 1811 (restart 1) running: 4 tasks on 127.0.0.[1-2], tasks per node 2(x2), time limit 30:00, USR2 90 s before it
//   [rank 0/4] resumed from /home/you/ddp-course/runs/06_slurm/1811/checkpoints/ckpt-000000121.pt at step 121 (--reset starts over)
//   [rank 0/4] check: every rank holds the same parameters: OK
//   [rank 0/4] params fingerprint f409279389ac72f0 (bit-identical runs print the same)
//   [slurm (local)] job 1811 ended: COMPLETED after 1 requeue(s)
// The same job under a real Slurm (sbatch 06_slurm/cpu_gloo.sbatch), and uninterrupted, ends with
// the same fingerprint (OpenBLAS's Haswell kernels, as every recorded figure): see README.md.

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "06_slurm/job.h"
#include "06_slurm/local_cluster.h"
#include "06_slurm/submit.h"
#include "common/hosts/simulated_hosts.h"
#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/slurm/hostlist.h"
#include "common/basics/log.h"
#include "common/basics/paths.h"

namespace {

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) ? cwd : ".";
  return path.empty() || path == "." ? here : here + "/" + path;
}

// What the flags ask for: the job, and what to do with it.
struct Plan {
  ddp::JobSpec job;
  std::string signal_spec = "USR2@90", script_out;
  std::optional<int> tasks;
  std::optional<std::string> link;
  bool submit = false, follow = false, local = false;
  double timeout_s = 30;
};

// 1. The plan: the flags, read and checked before anything is written or submitted.
Plan read_plan(int argc, char** argv) {
  CLI::App app{"06_slurm: write, submit and follow a Slurm job of chapter 05's trainer, or run it here with --local"};
  ddp::show_true_defaults(app);  // Note [Help that tells the truth]
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Plan p;
  ddp::JobSpec& j = p.job;
  app.add_option("--nodes", j.nodes, "Machines")->check(CLI::Range(1, 100000));
  app.add_option("--tasks-per-node", p.tasks, "Ranks per machine [default: 2; with GPUs: --gpus-per-node]")->check(CLI::Range(1, 1024));
  app.add_option("--gpus-per-node", j.gpus_per_node, "GPUs per machine, one rank each, NCCL (0: CPU ranks on Gloo)")->check(CLI::Range(0, 64));
  app.add_option("--cpus-per-task", j.cpus_per_task, "Cores per rank")->check(CLI::Range(1, 1024));
  app.add_option("--partition", j.partition, "Slurm partition (queue) [default: the cluster's]");
  app.add_option("--time", j.time, "Time limit: M, M:S, H:M:S, D-H[:M[:S]]");
  app.add_option("--nodelist", j.nodelist, "Run on exactly these nodes (a Slurm host list)");
  app.add_option("--signal", p.signal_spec, "Warning before the limit, SIGNAL@SECONDS, or none");
  app.add_option("--sbatch", j.extra_lines, "One more #SBATCH option, verbatim (repeat for several)");
  app.add_option("--job-name", j.name, "Job name");
  app.add_option("--trainer", j.trainer, "The trainer [default: 05_ddp beside this program]");
  app.add_option("--out-dir", j.out_dir, "Job logs and the trainer's run folders <job id>/");
  app.add_option("--script-out", p.script_out, "Write the script here [default: print it; with --submit: <out-dir>/<name>.sbatch]");
  app.add_flag("--submit", p.submit, "Submit the script with sbatch and print the job id");
  app.add_flag("--follow", p.follow, "After --submit: print rank 0's log and the job's state until it ends");
  app.add_flag("--local", p.local, "Run the job on this machine with a simulated Slurm (no cluster needed)");
  app.add_option("--max-requeue", j.max_requeue, "With --local: requeues before the job is held (5 is Slurm's MaxBatchRequeue)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--link", p.link, "With --local: each node a host with its own address, on a link of this bandwidth (e.g. 100mbit); needs root");
  app.add_option("--timeout", p.timeout_s, "Seconds each sbatch/scontrol call may take")->check(CLI::PositiveNumber);
  // Everything after "--" goes to the trainer, as in the batch scripts' "$@".
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    j.trainer_args.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("06_slurm");

  j.time_s = ddp::parse_slurm_time(j.time);
  ddp::parse_signal_spec(p.signal_spec, j);
  if (!j.no_signal && j.signal_before_s >= j.time_s) {
    throw ddp::UsageError("--signal " + p.signal_spec + " would come before the job starts: the time limit is " + j.time);
  }
  if (j.gpus_per_node > 0 && p.tasks && *p.tasks != j.gpus_per_node) {
    throw ddp::UsageError("--tasks-per-node " + std::to_string(*p.tasks) + " with --gpus-per-node " + std::to_string(j.gpus_per_node) +
                          ": one task per GPU (NCCL refuses two ranks on one GPU), so give one of them");
  }
  j.tasks_per_node = j.gpus_per_node > 0 ? j.gpus_per_node : p.tasks.value_or(2);
  if (p.follow && !p.submit) throw ddp::UsageError("--follow follows a job that --submit submitted: add --submit");
  if (p.local && (p.submit || !p.script_out.empty())) throw ddp::UsageError("--local runs the job here: drop --submit/--script-out");
  if (p.link && !p.local) throw ddp::UsageError("--link shapes the simulated nodes' links: add --local (a real cluster has real links)");
  if (p.link) j.link_bits_per_s = ddp::parse_link_rate(*p.link);
  if (!j.nodelist.empty()) ddp::expand_hostlist(j.nodelist);  // refuses a malformed list now, not in the queue
  j.trainer = absolute(j.trainer.empty() ? ddp::program_beside("05_ddp") : j.trainer);
  if (::access(j.trainer.c_str(), X_OK) != 0) throw ddp::UsageError("the trainer " + j.trainer + " is not there: build 05_ddp");
  j.out_dir = absolute(j.out_dir.empty() ? "runs/06_slurm" : j.out_dir);
  j.submit_dir = absolute("");
  // Slurm does not create the folder of --output: without it the job's log would be lost.
  ddp::make_dirs(j.out_dir);
  return p;
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

}  // namespace

int main(int argc, char** argv) {
  // Under the name `scontrol`, this program is the stand-in that --local puts on the tasks' PATH.
  const char* base = std::strrchr(argv[0], '/');
  if (std::strcmp(base ? base + 1 : argv[0], "scontrol") == 0) return ddp::local_scontrol(argc, argv);

  return ddp::guarded_main([&] {
    const Plan p = read_plan(argc, argv);           // 1.
    const std::string script = batch_script(p.job);  // 2.
    // 3. With --local: the same job on this machine, as Slurm would run it (Note [The simulated cluster]);
    //    the simulator gives the tasks what the script's #SBATCH lines ask for.
    if (p.local) return ddp::run_local(p.job);

    // 4. Print or write the script; submit it with sbatch and follow it (Note [Submitting and following a job]).
    if (!p.submit && p.script_out.empty()) return std::cout << script, ddp::kExitOk;
    const std::string path = p.script_out.empty() ? p.job.out_dir + "/" + p.job.name + ".sbatch" : absolute(p.script_out);
    std::ofstream(path) << script;
    if (!p.submit) return ddp::log("batch script written: " + path), ddp::kExitOk;
    const std::string id = ddp::submit(path, p.timeout_s);
    ddp::log("submitted job " + id + " (" + path + "); its log: " + p.job.out_dir + "/" + p.job.name + "-" + id + ".out");
    return p.follow ? ddp::follow(p.job, id, p.timeout_s) : ddp::kExitOk;
  });
}
