// provides: read_plan() (06_slurm's flags, read and checked), JobSpec's trainer command, and the
// parsers of Slurm's --time and --signal values.
#include "06_slurm/job.h"

#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/basics/paths.h"
#include "common/hosts/simulated_hosts.h"
#include "common/slurm/hostlist.h"
#include "common/slurm/signals.h"

namespace ddp {
namespace {

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) ? cwd : ".";
  return path.empty() || path == "." ? here : here + "/" + path;
}

}  // namespace

Plan read_plan(int argc, char** argv) {
  CLI::App app{"06_slurm: write, submit and follow a Slurm job of chapter 05's trainer, or run it here with --local"};
  show_true_defaults(app);  // Note [Help that tells the truth]
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Plan p;
  JobSpec& j = p.job;
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
  app.add_option("--batch", j.batch, "With --local: run this batch script as sbatch would (its #SBATCH lines, its srun steps; "
                                     "the flags after -- are its arguments), not 05's trainer");
  app.add_option("--max-requeue", j.max_requeue, "With --local: requeues before the job is held (5 is Slurm's MaxBatchRequeue)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--link", p.link, "With --local: each node a host with its own address, on a link of this bandwidth (e.g. 100mbit); needs root");
  app.add_option("--timeout", p.timeout_s, "Seconds each sbatch/scontrol call may take; --follow asks again while scontrol fails, this long")->check(CLI::PositiveNumber);
  // Everything after "--" goes to the trainer, as in the batch scripts' "$@".
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    j.trainer_args.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  parse_flags(app, argc, argv);
  set_log_identity("06_slurm");
  // Note [A batch script in the simulated cluster]: the script's own #SBATCH lines, where no flag overrides them.
  if (!j.batch.empty()) {
    if (!p.local) throw UsageError("--batch runs a batch script in the simulated cluster: add --local (on a cluster: sbatch it)");
    if (p.link) throw UsageError("--batch with --link is not simulated: its steps would have to enter their nodes; drop --link");
    if (::access(j.batch.c_str(), R_OK) != 0) throw UsageError("--batch " + j.batch + ": no such script to read");
    j.batch = absolute(j.batch);
    if (app.count("--signal") == 0) p.signal_spec = "none";  // sbatch warns only when asked (#SBATCH --signal)
    for (const auto& [name, value] : sbatch_options(j.batch)) {
      const std::string flag = name == "--ntasks-per-node" ? "--tasks-per-node" : name;
      if (app.get_option_no_throw(flag) == nullptr || app.count(flag) > 0) continue;  // not ours, or given
      if (flag == "--nodes" || flag == "--tasks-per-node" || flag == "--cpus-per-task") {
        try {
          const int n = std::stoi(value);
          if (n < 1) throw std::invalid_argument(value);
          (flag == "--nodes" ? j.nodes : flag == "--cpus-per-task" ? j.cpus_per_task : p.tasks.emplace()) = n;
        } catch (const std::exception&) {
          throw UsageError(j.batch + ": #SBATCH " + name + "=" + value + ": not a count of 1 or more");
        }
      } else if (flag == "--time") {
        j.time = value;
      } else if (flag == "--job-name") {
        j.name = value;
      } else if (flag == "--signal") {
        p.signal_spec = value;
      }
    }
  }

  j.time_s = parse_slurm_time(j.time);
  parse_signal_spec(p.signal_spec, j);
  if (!j.no_signal && j.signal_before_s >= j.time_s) {
    throw UsageError("--signal " + p.signal_spec + " would come before the job starts: the time limit is " + j.time);
  }
  if (j.gpus_per_node > 0 && p.tasks && *p.tasks != j.gpus_per_node) {
    throw UsageError("--tasks-per-node " + std::to_string(*p.tasks) + " with --gpus-per-node " + std::to_string(j.gpus_per_node) +
                     ": one task per GPU (NCCL refuses two ranks on one GPU), so give one of them");
  }
  j.tasks_per_node = j.gpus_per_node > 0 ? j.gpus_per_node : p.tasks.value_or(2);
  if (p.follow && !p.submit) throw UsageError("--follow follows a job that --submit submitted: add --submit");
  if (p.local && (p.submit || !p.script_out.empty())) throw UsageError("--local runs the job here: drop --submit/--script-out");
  if (p.link && !p.local) throw UsageError("--link shapes the simulated nodes' links: add --local (a real cluster has real links)");
  if (p.link) j.link_bits_per_s = parse_link_rate(*p.link);
  if (!j.nodelist.empty()) expand_hostlist(j.nodelist);  // refuses a malformed list now, not in the queue
  j.trainer = absolute(j.trainer.empty() ? program_beside("05_ddp") : j.trainer);
  if (j.batch.empty() && ::access(j.trainer.c_str(), X_OK) != 0) throw UsageError("the trainer " + j.trainer + " is not there: build 05_ddp");
  j.out_dir = absolute(j.out_dir.empty() ? "runs/06_slurm" : j.out_dir);
  j.submit_dir = absolute("");
  // Slurm does not create the folder of --output: without it the job's log would be lost.
  make_dirs(j.out_dir);
  if (!p.script_out.empty()) p.script_out = absolute(p.script_out);
  else if (p.submit) p.script_out = j.out_dir + "/" + j.name + ".sbatch";
  return p;
}

std::vector<std::pair<std::string, std::string>> sbatch_options(const std::string& script) {
  std::ifstream in(script);
  if (!in) throw UsageError("--batch " + script + ": cannot read it");
  std::vector<std::pair<std::string, std::string>> options;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '#') {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      break;  // sbatch reads no #SBATCH line after the first command
    }
    if (line.rfind("#SBATCH ", 0) != 0) continue;
    std::istringstream words(line.substr(8));
    std::string option, value;
    words >> option;
    if (option.rfind("--", 0) != 0) continue;  // short forms (-N 2) are left to real sbatch
    const size_t eq = option.find('=');
    if (eq != std::string::npos) value = option.substr(eq + 1), option = option.substr(0, eq);
    else if (!(words >> value) || value[0] == '#') value.clear();
    options.emplace_back(option, value);
  }
  return options;
}

std::vector<std::string> JobSpec::task_command(const std::string& job_id) const {
  std::vector<std::string> cmd{trainer, "--backend", backend(), "--out", out_dir + "/" + job_id};
  if (!no_signal) cmd.insert(cmd.end(), {"--requeue-signal", signal});
  cmd.insert(cmd.end(), trainer_args.begin(), trainer_args.end());
  return cmd;
}

namespace {
long number(const std::string& text, const std::string& whole) {
  if (text.empty() || text.size() > 7) throw UsageError("--time '" + whole + "': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S");
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      throw UsageError("--time '" + whole + "': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S");
    }
  }
  return std::stol(text);
}
}  // namespace

int parse_slurm_time(const std::string& text) {
  long days = 0;
  std::string rest = text;
  const size_t dash = text.find('-');
  if (dash != std::string::npos) days = number(text.substr(0, dash), text), rest = text.substr(dash + 1);
  std::vector<long> parts;
  size_t start = 0;
  for (size_t colon; (colon = rest.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(number(rest.substr(start, colon - start), text));
  }
  parts.push_back(number(rest.substr(start), text));
  long s = 0;
  if (dash != std::string::npos) {  // D-H, D-H:M, D-H:M:S
    if (parts.size() > 3) throw UsageError("--time '" + text + "': too many fields");
    const long mult[] = {3600, 60, 1};
    for (size_t k = 0; k < parts.size(); ++k) s += parts[k] * mult[k];
    s += days * 86400;
  } else if (parts.size() == 1) {
    s = parts[0] * 60;  // minutes
  } else if (parts.size() == 2) {
    s = parts[0] * 60 + parts[1];
  } else if (parts.size() == 3) {
    s = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    throw UsageError("--time '" + text + "': too many fields");
  }
  if (s <= 0 || s > 365L * 86400) throw UsageError("--time '" + text + "': must be more than 0 and at most a year");
  return static_cast<int>(s);
}

void parse_signal_spec(const std::string& text, JobSpec& spec) {
  if (text == "none") {
    spec.no_signal = true;
    return;
  }
  const size_t at = text.find('@');
  if (at == std::string::npos) throw UsageError("--signal '" + text + "': expected SIGNAL@SECONDS (e.g. USR2@90) or none");
  parse_signal(text.substr(0, at));  // refuses an unknown signal
  spec.signal = text.substr(0, at);
  if (spec.signal.rfind("SIG", 0) == 0) spec.signal = spec.signal.substr(3);  // sbatch wants USR2
  const std::string secs = text.substr(at + 1);
  if (secs.empty() || secs.size() > 5 || secs.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError("--signal '" + text + "': the seconds after @ must be a number (at most 65535, Slurm's limit)");
  }
  spec.signal_before_s = std::stoi(secs);
  if (spec.signal_before_s > 65535) throw UsageError("--signal '" + text + "': at most 65535 seconds (Slurm's limit)");
  spec.no_signal = false;
}

}  // namespace ddp
