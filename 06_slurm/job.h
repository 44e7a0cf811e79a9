// defines: JobSpec and Plan, what 06_slurm's flags describe (a Slurm job that runs chapter 05's
// trainer, and what to do with it), and read_plan(), which reads and checks those flags.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct JobSpec {
  std::string name = "ddp";
  int nodes = 1;
  int tasks_per_node = 2;  // one rank per task; with GPUs, one task per GPU
  int gpus_per_node = 0;   // 0: CPU job, Gloo
  int cpus_per_task = 1;
  std::string partition, nodelist;
  std::string time = "30:00";  // as sbatch --time takes it
  int time_s = 1800;           // the same in seconds
  std::string signal = "USR2";
  int signal_before_s = 90;  // the warning comes this long before the limit
  bool no_signal = false;    // --signal none: no warning, as an unprepared job
  std::vector<std::string> extra_lines;  // more #SBATCH options, verbatim
  int max_requeue = 5;                   // --local: requeues before the job is held (MaxBatchRequeue)
  double link_bits_per_s = 0;            // --local --link: nodes as hosts on links of this rate (0: loopback)
  std::string batch;                     // --local --batch: a batch script, run as sbatch would (absolute)
  std::string trainer;                   // absolute path of 05_ddp
  std::string out_dir;                   // absolute: job logs and <job id>/ of the trainer
  std::string submit_dir;                // absolute: where the job starts (--chdir)
  std::vector<std::string> trainer_args;  // or, with --batch, the script's arguments
  int world() const { return nodes * tasks_per_node; }
  std::string backend() const { return gpus_per_node > 0 ? "nccl" : "gloo"; }
  // The trainer's command line for one task; the job id decides the run folder.
  std::vector<std::string> task_command(const std::string& job_id) const;
};

// What the flags ask for: the job, and what to do with it.
struct Plan {
  JobSpec job;
  std::string signal_spec = "USR2@90";
  std::string script_out;  // absolute; "" (neither --script-out nor --submit): print the script
  std::optional<int> tasks;
  std::optional<std::string> link;
  bool submit = false, follow = false, local = false;
  double timeout_s = 30;
};

// 06_slurm's flags, and after "--" the trainer's, read and checked before anything is written or
// submitted: UsageError for a plan that cannot work. Creates the job's --out-dir.
Plan read_plan(int argc, char** argv);

// A batch script's #SBATCH options, "--name=value" or "--name value", read as sbatch reads them:
// from the lines before its first command. UsageError if it cannot be read.
std::vector<std::pair<std::string, std::string>> sbatch_options(const std::string& script);

// Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S -> seconds. UsageError otherwise.
int parse_slurm_time(const std::string& text);

// "USR2@90" -> ("USR2", 90); "none" -> no_signal. UsageError otherwise.
void parse_signal_spec(const std::string& text, JobSpec& spec);

}  // namespace ddp
