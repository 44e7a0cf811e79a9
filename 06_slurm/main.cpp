// 06_slurm: chapter 05's trainer as a Slurm job: the batch script, one task per rank, the
// warning signal before the time limit, and the requeue that resumes from a checkpoint.
//
// The lesson: what a Slurm job of a DDP trainer is made of. This program writes the batch script
// from a few flags (every #SBATCH line says why it is there), submits it with sbatch and follows
// rank 0's log to the end, saying how the job ended. With --local it runs the same job on this
// machine, with the environment Slurm would give each task (see local_cluster.cpp), so the whole
// path, preemption and requeue included, can be watched without a cluster. The trainer's side of
// preemption is in common/slurm/preemption.h (Note [Preemption and requeue]).
//
// Usage:
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2                       # print the batch script
//   ./build-cpu/06_slurm --nodes 2 --tasks-per-node 2 --submit --follow -- --max-steps 300
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 -- --max-steps 300   # no Slurm needed
//   ./build-cpu/06_slurm --local --nodes 2 --tasks-per-node 2 --time 0:40 --signal USR2@30 -- --epochs 1
//   ./build-cuda/06_slurm --nodes 2 --gpus-per-node 4 --partition gpu --time 4:00:00 --submit
//
// Expected output (--local --nodes 2 --tasks-per-node 2 --time 0:25 --signal USR2@15 -- --max-steps 700; trimmed):
//   [slurm (local)] simulated Slurm: job 5693 (ddp), 2 node(s) x 2 task(s); trainer output in runs/06_slurm/5693
//   [slurm (local)] job 5693 running: 4 tasks on 127.0.0.[1-2], tasks per node 2(x2), time limit 0:25, USR2 15 s before it
//   [rank 0/4] model mlp: 535818 parameters, all-reduced in buckets while backward runs (the first iteration in one)
//   [slurm (local)] job 5693: 15 s before the time limit: sending SIGUSR2 to every task
//   [rank 0/4] preempted: SIGUSR2 received; stopped after step 312 with its checkpoint written; requeueing Slurm job 5693 (restart 0)
//   [slurm (local)] job 5693 requeued: starting again in 2s with SLURM_RESTART_COUNT=1
//   [rank 0/4] resumed from runs/06_slurm/5693/checkpoints/ckpt-000000312.pt at step 312 (--reset starts over)
//   ... (one more warning, checkpoint and requeue: at step 668)
//   [rank 0/4] check: every rank holds the same parameters: OK
//   [rank 0/4] params fingerprint 5b73dc37cbd72310 (bit-identical runs print the same)
//   [slurm (local)] job 5693 ended: COMPLETED after 2 requeue(s)
// The same job under a real Slurm, sent SIGUSR2 once (sbatch 06_slurm/cpu_gloo.sbatch --max-steps 700),
// ends with the same fingerprint: see README.md.

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "06_slurm/job.h"
#include "06_slurm/local_cluster.h"
#include "common/hosts/simulated_hosts.h"
#include "common/basics/cli.h"
#include "common/launch/command.h"
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

// 1. The batch script. sbatch reads the #SBATCH lines (they must come before the first command),
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

// 2. Submit: `sbatch --parsable` answers "<job id>" or "<job id>;<cluster>".
std::string submit(const std::string& script_path, double timeout_s) {
  const ddp::CommandResult r = ddp::run_command({"sbatch", "--parsable", script_path}, timeout_s);
  if (!r.started) throw ddp::UsageError("sbatch is not on PATH: no Slurm here; try --local");
  if (r.exit_code != 0) throw std::runtime_error("sbatch " + script_path + " failed: " + r.output);
  const std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw std::runtime_error("sbatch answered '" + r.output + "', not a job id");
  }
  return id;
}

// One field of `scontrol show job -o <id>` ("JobState=RUNNING ..."), or "" if absent.
std::string field(const std::string& record, const std::string& key) {
  const size_t at = record.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  return record.substr(from, record.find(' ', from) - from);
}

// 3. Follow: print rank 0's log as it grows, and every change of the job's state, until it ends.
int follow(const ddp::JobSpec& j, const std::string& id, double timeout_s) {
  const std::string rank0_log = j.out_dir + "/" + id + "/rank0.log";
  std::streamoff printed = 0;
  std::string last_state;
  auto print_new_lines = [&] {
    std::ifstream in(rank0_log);
    in.seekg(printed);
    for (std::string l; std::getline(in, l) && !in.eof();) std::cout << l << "\n", printed = in.tellg();
    std::cout.flush();
  };
  for (;;) {
    const ddp::CommandResult r = ddp::run_command({"scontrol", "show", "job", "-o", id}, timeout_s);
    if (r.exit_code != 0) throw std::runtime_error("scontrol show job " + id + " failed: " + r.output);
    const std::string rec = " " + r.output, state = field(rec, "JobState"), restarts = field(rec, "Restarts");
    print_new_lines();
    if (state + restarts != last_state) {
      ddp::log("job " + id + ": " + state + " (reason " + field(rec, "Reason") + ", restarts " + restarts + ", nodes " +
               field(rec, "NodeList") + ")");
      last_state = state + restarts;
    }
    const bool ended = state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING" &&
                       state != "REQUEUED" && state != "REQUEUE_FED" && state != "SUSPENDED" && state != "RESIZING";
    if (!ended) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    print_new_lines();
    const std::string summary = "job " + id + " ended: " + state + " (exit " + field(rec, "ExitCode") + ", restarts " + restarts +
                                "); its log: " + j.out_dir + "/" + j.name + "-" + id + ".out";
    if (state == "COMPLETED") return ddp::log(summary), ddp::kExitOk;
    if (state == "TIMEOUT") {
      ddp::log_error(summary + ": it hit its time limit (" + j.time + ") and was killed, SIGTERM then SIGKILL" +
                     (j.no_signal ? "; no warning signal was requested, so it could not checkpoint first: add --signal USR2@90"
                                  : "; the warning signal came too late for a checkpoint, or was not handled"));
    } else {
      ddp::log_error(summary);
    }
    return ddp::kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Under the name `scontrol`, this program is the stand-in that --local puts on the tasks' PATH.
  const char* base = std::strrchr(argv[0], '/');
  if (std::strcmp(base ? base + 1 : argv[0], "scontrol") == 0) return ddp::local_scontrol(argc, argv);

  CLI::App app{"06_slurm: write, submit and follow a Slurm job of chapter 05's trainer, or run it here with --local"};
  ddp::show_true_defaults(app);  // Note [Help that tells the truth]
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ddp::JobSpec j;
  std::string signal_spec = "USR2@90", script_out;
  std::optional<int> tasks;
  bool do_submit = false, do_follow = false, local = false;
  double timeout_s = 30;
  app.add_option("--nodes", j.nodes, "Machines")->check(CLI::Range(1, 100000));
  app.add_option("--tasks-per-node", tasks, "Ranks per machine [default: 2; with GPUs: --gpus-per-node]")->check(CLI::Range(1, 1024));
  app.add_option("--gpus-per-node", j.gpus_per_node, "GPUs per machine, one rank each, NCCL (0: CPU ranks on Gloo)")->check(CLI::Range(0, 64));
  app.add_option("--cpus-per-task", j.cpus_per_task, "Cores per rank")->check(CLI::Range(1, 1024));
  app.add_option("--partition", j.partition, "Slurm partition (queue) [default: the cluster's]");
  app.add_option("--time", j.time, "Time limit: M, M:S, H:M:S, D-H[:M[:S]]");
  app.add_option("--nodelist", j.nodelist, "Run on exactly these nodes (a Slurm host list)");
  app.add_option("--signal", signal_spec, "Warning before the limit, SIGNAL@SECONDS, or none");
  app.add_option("--sbatch", j.extra_lines, "One more #SBATCH option, verbatim (repeat for several)");
  app.add_option("--job-name", j.name, "Job name");
  app.add_option("--trainer", j.trainer, "The trainer [default: 05_ddp beside this program]");
  app.add_option("--out-dir", j.out_dir, "Job logs and the trainer's run folders <job id>/");
  app.add_option("--script-out", script_out, "Write the script here [default: print it; with --submit: <out-dir>/<name>.sbatch]");
  app.add_flag("--submit", do_submit, "Submit the script with sbatch and print the job id");
  app.add_flag("--follow", do_follow, "After --submit: print rank 0's log and the job's state until it ends");
  app.add_flag("--local", local, "Run the job on this machine with a simulated Slurm (no cluster needed)");
  app.add_option("--max-requeue", j.max_requeue, "With --local: requeues before the job is held (5 is Slurm's MaxBatchRequeue)")
      ->check(CLI::Range(0, 1000));
  std::optional<std::string> link;
  app.add_option("--link", link, "With --local: each node a host with its own address, on a link of this bandwidth (e.g. 100mbit); needs root");
  app.add_option("--timeout", timeout_s, "Seconds each sbatch/scontrol call may take")->check(CLI::PositiveNumber);
  // Everything after "--" goes to the trainer, as in the batch scripts' "$@".
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    j.trainer_args.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("06_slurm");

  return ddp::guarded_main([&] {
    // 0. Check the plan before anything is written or submitted.
    j.time_s = ddp::parse_slurm_time(j.time);
    ddp::parse_signal_spec(signal_spec, j);
    if (!j.no_signal && j.signal_before_s >= j.time_s) {
      throw ddp::UsageError("--signal " + signal_spec + " would come before the job starts: the time limit is " + j.time);
    }
    if (j.gpus_per_node > 0 && tasks && *tasks != j.gpus_per_node) {
      throw ddp::UsageError("--tasks-per-node " + std::to_string(*tasks) + " with --gpus-per-node " + std::to_string(j.gpus_per_node) +
                            ": one task per GPU (NCCL refuses two ranks on one GPU), so give one of them");
    }
    j.tasks_per_node = j.gpus_per_node > 0 ? j.gpus_per_node : tasks.value_or(2);
    if (do_follow && !do_submit) throw ddp::UsageError("--follow follows a job that --submit submitted: add --submit");
    if (local && (do_submit || !script_out.empty())) throw ddp::UsageError("--local runs the job here: drop --submit/--script-out");
    if (link && !local) throw ddp::UsageError("--link shapes the simulated nodes' links: add --local (a real cluster has real links)");
    if (link) j.link_bits_per_s = ddp::parse_link_rate(*link);
    if (!j.nodelist.empty()) ddp::expand_hostlist(j.nodelist);  // refuses a malformed list now, not in the queue
    j.trainer = absolute(j.trainer.empty() ? ddp::program_beside("05_ddp") : j.trainer);
    if (::access(j.trainer.c_str(), X_OK) != 0) throw ddp::UsageError("the trainer " + j.trainer + " is not there: build 05_ddp");
    j.out_dir = absolute(j.out_dir.empty() ? "runs/06_slurm" : j.out_dir);
    j.submit_dir = absolute("");
    // Slurm does not create the folder of --output: without it the job's log would be lost.
    ddp::make_dirs(j.out_dir);

    if (local) return ddp::run_local(j);

    const std::string script = batch_script(j);
    if (!do_submit && script_out.empty()) return std::cout << script, ddp::kExitOk;
    const std::string path = script_out.empty() ? j.out_dir + "/" + j.name + ".sbatch" : absolute(script_out);
    std::ofstream(path) << script;
    if (!do_submit) return ddp::log("batch script written: " + path), ddp::kExitOk;
    const std::string id = submit(path, timeout_s);
    ddp::log("submitted job " + id + " (" + path + "); its log: " + j.out_dir + "/" + j.name + "-" + id + ".out");
    return do_follow ? follow(j, id, timeout_s) : ddp::kExitOk;
  });
}
