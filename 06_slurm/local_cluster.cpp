// provides: the simulated cluster of `06_slurm --local` and its stand-in for scontrol.
#include "06_slurm/local_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "common/launch/error_file.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/basics/paths.h"
#include "common/slurm/hostlist.h"
#include "common/slurm/signals.h"
#include "common/launch/rank_env.h"
#include "common/hosts/simulated_hosts.h"

extern char** environ;

namespace ddp {

// Note [The simulated cluster]
// What Slurm does for a job, done here with plain processes, so that a learner without Slurm
// sees the same trainer take the same path:
//   * Nodes are named by loopback addresses, 127.0.0.1 .. 127.0.0.N, written as a Slurm host list
//     ("127.0.0.[1-2]"): the trainer expands it and finds rank 0's address, the first host, as it
//     would find "gpu01". (Real node names would need DNS; these resolve everywhere.)
//     With --link the nodes are hosts, node0 .. nodeN-1 on shaped links (Note [Nodes as hosts]):
//     the list is "node[0-1]", each task runs in its node's namespaces, and the names resolve there.
//   * The job id is chosen so that the port the trainer derives from it (15000 + id % 10000) is
//     free right now.
//   * Every task gets the variables srun sets (see run_local()), with an environment cleaned of
//     the caller's RANK, MASTER_*, SLURM_*, torchrun's variables and GLOO_SOCKET_IFNAME.
//   * The time limit: the warning signal (--signal SIG@S) S seconds before it, SIGTERM at it,
//     SIGKILL KillWait later (the grace between the two: 5 s here and in the course's slurm.conf,
//     30 s by Slurm's default), and the job ends in Slurm's state for that. Real Slurm counts the
//     limit in minutes and checks it about every 30 s; here it is exact to the second.
//   * Requeue: `scontrol` on the tasks' PATH is this program under another name; `scontrol requeue`
//     leaves a note that the simulator reads: it stops what is left of the job (SIGTERM, then
//     SIGKILL) and starts it again 2 s later with SLURM_RESTART_COUNT=1, 2, ... (real Slurm: after
//     about 10 s to 2 min), at most --max-requeue times (default 5, as Slurm's MaxBatchRequeue).
//   * Ctrl-C or SIGTERM to the simulator cancels the job as scancel would: SIGTERM to every task,
//     SIGKILL KillWait later; no task outlives it.
//   * The state the job ends in, as Slurm's accounting (sacct) names it: COMPLETED when every
//     task exited 0; FAILED when a task ended otherwise (an exit code other than 0, or killed by a
//     signal) before the limit; TIMEOUT when the limit came first (Slurm's log says "CANCELLED DUE
//     TO TIME LIMIT", its state is TIMEOUT); CANCELLED by scancel or Ctrl-C; REQUEUE_HOLD when
//     it asked for a requeue once more than --max-requeue allows. A requeued job ends in the
//     state of its last run.
namespace {

constexpr double kKillWait = 5, kRequeueDelay = 2;
constexpr const char* kSimDirVar = "DDP_SLURM_LOCAL_DIR";
constexpr const char* kRequeueNote = "/requeue";  // in the simulator's folder: the stand-in scontrol's note
constexpr const char* kJobEnv = "/job.env";       // the job's variables, for a step started from another shell
constexpr const char* kSteps = "/steps";          // a pid file per such step: the job's end takes them with it

// A job id whose derived trainer port (15000 + id % 10000) is free now: as a scheduler hands out
// ids, but never one whose port another job on this machine holds.
int choose_job_id() {
  const int start = static_cast<int>(::getpid() % 9000) + 1000;
  for (int k = 0; k < 10000; ++k) {
    const int id = 1000 + (start - 1000 + k) % 9000;
    if (find_free_port("127.0.0.1", 15000 + id % 10000) > 0) return id;
  }
  throw std::runtime_error("no free port in 15000-24999 for a simulated job");
}

struct Task {
  int rank = 0, node = 0, local = 0;
  pid_t pid = -1;
  int status = 0;
  bool done = false;
};

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);  // "SIGUSR2 (User defined signal 2)": the name a student looks up
  const char* abbrev = sigabbrev_np(sig);
  return std::string(abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig)) + " (" + strsignal(sig) + ")";
}

// Every step started with `srun --jobid` from another shell (a pid file each in kSteps).
void signal_steps(const std::string& sim_dir, int sig) {
  DIR* d = ::opendir((sim_dir + kSteps).c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ::kill(static_cast<pid_t>(std::atol(e->d_name)), sig);
  }
  ::closedir(d);
}

// One run of the job (a requeue starts another). Returns the job's end state, Slurm's words.
std::string run_once(const JobSpec& spec, int job_id, int restart, const std::string& sim_dir, const SimulatedHosts* hosts) {
  auto node_name = [&](int node) { return hosts ? hosts->name(node) : "127.0.0." + std::to_string(node + 1); };
  const std::string nodelist = spec.nodes == 1 ? node_name(0)
                               : hosts         ? "node[0-" + std::to_string(spec.nodes - 1) + "]"
                                               : "127.0.0.[1-" + std::to_string(spec.nodes) + "]";
  const std::string tpn = std::to_string(spec.tasks_per_node) + (spec.nodes > 1 ? "(x" + std::to_string(spec.nodes) + ")" : "");
  const std::string job = std::to_string(job_id);
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!steers_rank_resolution(kv.substr(0, kv.find('='))) && kv.rfind("PATH=", 0) != 0) base.push_back(kv);
  }
  const char* path = std::getenv("PATH");
  base.push_back("PATH=" + sim_dir + "/bin:" + (path ? path : "/usr/bin:/bin"));  // our scontrol first
  base.push_back(std::string(kSimDirVar) + "=" + sim_dir);
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"SLURM_JOB_ID", job}, {"SLURM_JOBID", job}, {"SLURM_JOB_NAME", spec.name},
           {"SLURM_JOB_NODELIST", nodelist}, {"SLURM_STEP_NODELIST", nodelist}, {"SLURM_NNODES", std::to_string(spec.nodes)},
           {"SLURM_JOB_NUM_NODES", std::to_string(spec.nodes)}, {"SLURM_NTASKS", std::to_string(spec.world())},
           {"SLURM_NPROCS", std::to_string(spec.world())}, {"SLURM_TASKS_PER_NODE", tpn},
           {"SLURM_CPUS_PER_TASK", std::to_string(spec.cpus_per_task)},
           {"SLURM_SUBMIT_DIR", spec.submit_dir}, {"SLURM_CLUSTER_NAME", "local"}}) {
    base.push_back(k + "=" + v);
  }
  if (restart > 0) base.push_back("SLURM_RESTART_COUNT=" + std::to_string(restart));  // as Slurm: unset at first

  const bool batch = !spec.batch.empty();
  if (batch) {  // for `srun --jobid` from another shell: the job's own variables
    std::ofstream env_file(sim_dir + kJobEnv);
    for (const auto& kv : base) if (kv.rfind("SLURM_", 0) == 0) env_file << kv << "\n";
  } else {  // the tasks are step 0; a batch script is no step (sbatch sets no SLURM_STEP_ID: a trainer started in it is refused)
    base.insert(base.end(), {"SLURM_STEP_ID=0", "SLURM_STEPID=0"});
  }
  std::vector<std::string> cmd = spec.task_command(job);
  if (batch) cmd = {"/bin/bash", spec.batch}, cmd.insert(cmd.end(), spec.trainer_args.begin(), spec.trainer_args.end());
  // SIGINT/SIGTERM to the simulator cancel the job, as scancel would: they are blocked here and
  // read in the watch loop below, and unblocked again in every task.
  sigset_t cancel, previous;
  sigemptyset(&cancel);
  sigaddset(&cancel, SIGINT);
  sigaddset(&cancel, SIGTERM);
  sigprocmask(SIG_BLOCK, &cancel, &previous);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &previous);
  // A batch script in a process group of its own: the job's signals reach every step it started.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | (batch ? POSIX_SPAWN_SETPGROUP : 0));
  std::vector<Task> tasks(batch ? 1 : spec.world());
  std::fflush(nullptr);  // our buffered lines first: the tasks write to the same stdout
  for (int r = 0; r < static_cast<int>(tasks.size()); ++r) {
    Task& t = tasks[r];
    t.rank = r, t.node = r / spec.tasks_per_node, t.local = r % spec.tasks_per_node;
    std::vector<std::string> env = base;
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"SLURM_PROCID", std::to_string(r)}, {"SLURM_LOCALID", std::to_string(t.local)},
             {"SLURM_NODEID", std::to_string(t.node)}, {"SLURMD_NODENAME", node_name(t.node)}}) {
      env.push_back(k + "=" + v);
    }
    // setpriv (util-linux): the task dies with the simulator, also when that is killed with SIGKILL,
    // as slurmstepd takes its tasks with it; with --link the task enters its node first (nsenter).
    std::vector<std::string> words = {"setpriv", "--pdeathsig", "KILL", "--"};
    if (hosts) for (auto& w : hosts->enter_command(t.node)) words.push_back(w);
    words.insert(words.end(), cmd.begin(), cmd.end());
    std::vector<char*> argv, envp;
    for (const auto& a : words) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);
    const int err = ::posix_spawnp(&t.pid, words[0].c_str(), nullptr, &attr, argv.data(), envp.data());
    if (err != 0) throw UsageError("cannot start " + words[0] + ": " + std::strerror(err));
  }
  log("job " + job + (restart ? " (restart " + std::to_string(restart) + ")" : "") + " running: " +
      (batch ? "batch script " + spec.batch + " on " + node_name(0) + ", " + std::to_string(spec.nodes) + " node(s) " + nodelist
             : std::to_string(spec.world()) + " tasks on " + nodelist + ", tasks per node " + tpn) +
      ", time limit " + spec.time +
      (spec.no_signal ? ", no warning signal" : ", " + spec.signal + " " + std::to_string(spec.signal_before_s) + " s before it"));
  if (batch) log("its srun and scontrol: " + sim_dir + "/bin (first on PATH in another shell, `srun --jobid=" + job + " ...` starts a step in it)");

  // Watch, as slurmctld and slurmstepd would: the warning, the limit, a requeue, the tasks' ends.
  const double t0 = monotonic_seconds();
  const std::string requeue_note = sim_dir + kRequeueNote;
  posix_spawnattr_destroy(&attr);
  bool warned = spec.no_signal, terminated = false, requeued = false, cancelled = false;
  double kill_at = INFINITY;
  int alive = static_cast<int>(tasks.size());
  auto signal_all = [&](int sig) {
    for (Task& t : tasks) {
      if (!t.done) ::kill(batch ? -t.pid : t.pid, sig);
    }
    if (batch) signal_steps(sim_dir, sig);  // steps started from other shells
  };
  auto stop_all = [&](double t) {  // as slurmstepd ends a step: SIGTERM now, SIGKILL KillWait later
    signal_all(SIGTERM);
    kill_at = std::min(kill_at, t + kKillWait);
  };
  while (alive > 0) {
    const timespec tick{0, 50'000'000};
    const int sig = sigtimedwait(&cancel, nullptr, &tick);
    const double t = monotonic_seconds() - t0;
    if ((sig == SIGINT || sig == SIGTERM) && !cancelled) {
      cancelled = true;
      log_error("job " + job + ": " + strsignal(sig) + " received: cancelling it (SIGTERM to every task, SIGKILL " +
                seconds(kKillWait) + " later)");
      stop_all(t);
    }
    if (!warned && t >= spec.time_s - spec.signal_before_s) {
      warned = true;
      log("job " + job + ": " + std::to_string(spec.signal_before_s) + " s before the time limit: sending SIG" + spec.signal + " to every task");
      signal_all(parse_signal(spec.signal));
    }
    if (!requeued && ::access(requeue_note.c_str(), F_OK) == 0) {
      requeued = true;
      log("job " + job + ": requeue requested (scontrol requeue): stopping its tasks");
      stop_all(t);
    }
    if (!terminated && t >= spec.time_s) {
      terminated = true;
      log_error("job " + job + " CANCELLED DUE TO TIME LIMIT (" + spec.time + "): SIGTERM to every task, SIGKILL " +
                seconds(kKillWait) + " later");
      stop_all(t);
    }
    if (t >= kill_at) signal_all(SIGKILL);
    for (Task& task : tasks) {
      if (!task.done && ::waitpid(task.pid, &task.status, WNOHANG) == task.pid) task.done = true, --alive;
    }
  }
  ::unlink(requeue_note.c_str());
  if (batch) {  // the script has ended, and the job with it: Slurm ends every step left
    ::kill(-tasks[0].pid, SIGKILL);
    signal_steps(sim_dir, SIGKILL);
  }
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (cancelled) return "CANCELLED";
  if (requeued && !terminated) return "REQUEUED";
  if (terminated) return "TIMEOUT";
  for (const Task& task : tasks) {
    if (!(WIFEXITED(task.status) && WEXITSTATUS(task.status) == 0)) {
      log_error("job " + job + ": task " + std::to_string(task.rank) + " (node " + node_name(task.node) +
                ", pid " + std::to_string(task.pid) + ") ended with " + describe(task.status));
      return "FAILED";
    }
  }
  return "COMPLETED";
}

}  // namespace

int run_local(const JobSpec& spec) {
  if (spec.gpus_per_node > 0) throw UsageError("--local runs the ranks on this machine's CPU with Gloo: drop --gpus-per-node");
  set_log_identity("slurm (local)");
  // The folder's place first, then --link (refused when not root): refused before anything is
  // written or built. Under $TMPDIR, as mktemp(1) puts its folders: a simulator killed with
  // SIGKILL cannot remove its own, so a test that kills one gives it a TMPDIR of its own. The
  // path goes into the stand-ins' scripts (single quotes) and onto PATH (':' separates), as an
  // absolute path: a task's shell may be elsewhere.
  const char* tmp = std::getenv("TMPDIR");
  const bool own_tmp = tmp && *tmp;
  const std::filesystem::path base = own_tmp ? std::filesystem::absolute(tmp).lexically_normal() : "/tmp";
  std::string tmpl = (base / "06_slurm_local_XXXXXX").string();
  if (tmpl.find_first_of("':") != std::string::npos)
    throw UsageError("TMPDIR '" + std::string(tmp) + "' has a quote or a colon, which the simulator's scripts and PATH cannot hold");
  if (!::mkdtemp(tmpl.data())) {
    const std::string why = "cannot make the simulator's folder " + tmpl + ": " + std::strerror(errno);
    if (own_tmp) throw UsageError(why + " (TMPDIR is " + std::string(tmp) + ")");
    throw std::runtime_error(why);
  }
  const std::string sim_dir = tmpl;
  struct Removed {  // on every way out, an exception's included (--link refused): no run leaves its folder behind
    std::string dir;
    ~Removed() {
      ::unlink((dir + kRequeueNote).c_str());  // run_once()'s note, when it was cut short
      ::unlink((dir + kJobEnv).c_str());
      ::unlink((dir + "/step_ids").c_str());  // local_srun()'s counter
      for (const char* name : {"/bin/scontrol", "/bin/srun"}) ::unlink((dir + name).c_str());
      std::error_code ec;
      std::filesystem::remove_all(dir + kSteps, ec);
      ::rmdir((dir + "/bin").c_str());
      ::rmdir(dir.c_str());
    }
  } removed{sim_dir};
  std::unique_ptr<SimulatedHosts> hosts;
  if (spec.link_bits_per_s > 0) {
    hosts = std::make_unique<SimulatedHosts>(spec.nodes, spec.link_bits_per_s);
    log(std::to_string(spec.nodes) + " node(s) as hosts on " + describe_rate(spec.link_bits_per_s) + " links to one bridge (node0 = " +
        hosts->address(0) + ", ...)");
  }
  ::mkdir((sim_dir + "/bin").c_str(), 0755);
  // The stand-ins: this program under Slurm's names, told where the simulator keeps its notes
  // (a shell of the learner's has no DDP_SLURM_LOCAL_DIR); srun for a batch script only.
  std::vector<const char*> stand_ins{"scontrol"};
  if (!spec.batch.empty()) stand_ins.push_back("srun"), ::mkdir((sim_dir + kSteps).c_str(), 0755);
  for (const char* name : stand_ins) {
    const std::string path = sim_dir + "/bin/" + name;
    std::ofstream(path) << "#!/bin/bash\nexport " << kSimDirVar << "='" << sim_dir << "'\nexec -a " << name << " '"
                        << this_program() << "' \"$@\"\n";
    if (::chmod(path.c_str(), 0755) != 0) throw std::runtime_error("cannot place the stand-in " + std::string(name) + " in " + sim_dir + "/bin");
  }
  const int job_id = choose_job_id();
  log("simulated Slurm: job " + std::to_string(job_id) + " (" + spec.name + "), " + std::to_string(spec.nodes) +
      " node(s) x " + std::to_string(spec.tasks_per_node) + " task(s); trainer output in " + spec.out_dir + "/" +
      std::to_string(job_id));
  std::string state;
  int restart = 0;
  for (;; ++restart) {
    state = run_once(spec, job_id, restart, sim_dir, hosts.get());
    if (state != "REQUEUED") break;
    if (restart + 1 > spec.max_requeue) {
      state = "REQUEUE_HOLD";
      break;
    }
    log("job " + std::to_string(job_id) + " requeued: starting again in " + seconds(kRequeueDelay) + " with SLURM_RESTART_COUNT=" +
        std::to_string(restart + 1));
    std::this_thread::sleep_for(std::chrono::duration<double>(kRequeueDelay));
  }
  const std::string summary = "job " + std::to_string(job_id) + " ended: " + state + " after " + std::to_string(restart) + " requeue(s)";
  if (state == "COMPLETED") {
    log(summary);
    return kExitOk;
  }
  log_error(summary + (state == "TIMEOUT" ? (spec.no_signal ? ": it hit its time limit with no warning signal, so it could not "
                                                              "checkpoint there: what it trained since its last "
                                                              "checkpoint is lost; ask for a warning with --signal USR2@90"
                                                            : ": it hit its time limit")
                                          : state == "REQUEUE_HOLD"
                                              ? ": it asked for a requeue once more than --max-requeue " + std::to_string(spec.max_requeue) +
                                                    " allows; its checkpoints are kept"
                                              : ""));
  return kExitFailure;
}

// Note [A batch script in the simulated cluster]
// With --batch SCRIPT the job is a batch script, as sbatch runs it: its #SBATCH lines give what no
// flag gives (job.cpp), and the script runs once, on the first node, with the job's variables, in
// a process group of its own, so that the job's signals reach every step it started. Its `srun`
// is this program under that name (local_srun()): a step's tasks get the step's variables
// (SLURM_PROCID, SLURM_NODEID, SLURM_STEP_ID, ...); a task killed by a signal ends its step only
// ("srun: error: NODE: task R: Killed", exit 128 + the signal), as srun does, and the job goes on.
// The stand-ins' folder is printed: first on PATH in another shell, `srun --jobid=ID ...` starts a
// step in the running job (Slurm's --overlap), which the job's end takes with it. The job's state
// is its script's: COMPLETED when it exits 0. `scontrol show hostnames` writes the host list out.
// Its #SBATCH --output is not read: the job's lines go to the simulator's output. Not with --link:
// a step would have to enter its node's namespaces.
int local_scontrol(int argc, char** argv) {
  const char* dir = std::getenv(kSimDirVar);
  if (argc == 3 && std::string(argv[1]) == "requeue" && dir) {
    std::ofstream(std::string(dir) + kRequeueNote) << argv[2] << "\n";
    return 0;
  }
  if (argc >= 3 && argc <= 4 && std::string(argv[1]) == "show" && std::string(argv[2]) == "hostnames") {
    const char* list = argc == 4 ? argv[3] : std::getenv("SLURM_JOB_NODELIST");
    try {
      for (const std::string& host : expand_hostlist(list ? list : "")) std::printf("%s\n", host.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scontrol: show hostnames: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "scontrol: this is 06_slurm --local's stand-in: only 'scontrol requeue <job id>' and "
                       "'scontrol show hostnames [LIST]' inside a local job are simulated\n");
  return 1;
}

namespace {

// The next step id of the job: a counter in the simulator's folder, under a lock (steps may start at once).
int next_step_id(const std::string& dir) {
  const int fd = ::open((dir + "/step_ids").c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) return 0;
  ::flock(fd, LOCK_EX);
  char text[32] = {0};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  const int id = n > 0 ? std::atoi(text) + 1 : 0;  // the first srun step is step 0, as in Slurm
  const std::string next = std::to_string(id);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, next.c_str(), next.size(), 0) < 0) { /* ids then repeat: harmless */ }
  ::close(fd);
  return id;
}

int srun_usage(const std::string& why) {
  std::fprintf(stderr, "srun: %s (this is 06_slurm --local's stand-in: --nodes, --ntasks, --relative, --cpus-per-task, "
                       "--job-name, --jobid and --overlap are simulated)\n", why.c_str());
  return kExitUsage;
}

}  // namespace

int local_srun(int argc, char** argv) {
  const char* dir_var = std::getenv(kSimDirVar);
  if (!dir_var) return srun_usage("no simulated job here: run it inside a job of 06_slurm --local --batch, or from the folder it prints");
  const std::string dir = dir_var;
  std::optional<int> nodes, ntasks;
  int relative = 0;
  std::string jobid, name;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; ++i) {
    std::string key = argv[i], value;
    const size_t eq = key.find('=');
    if (eq != std::string::npos) value = key.substr(eq + 1), key = key.substr(0, eq);
    else if (key != "--overlap" && i + 1 < argc) value = argv[++i];
    try {
      if (key == "--nodes") nodes = std::stoi(value);
      else if (key == "--ntasks") ntasks = std::stoi(value);
      else if (key == "--relative") relative = std::stoi(value);
      else if (key == "--cpus-per-task") (void)std::stoi(value);
      else if (key == "--jobid") jobid = value;
      else if (key == "--job-name") name = value;
      else if (key != "--overlap") return srun_usage(key + " is not simulated");
    } catch (const std::exception&) {
      return srun_usage(key + " '" + value + "': not a number");
    }
  }
  if (i >= argc) return srun_usage("no program to run");
  // The job's variables: inherited inside the batch script; from another shell, the job's file.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  std::ifstream job_env(dir + kJobEnv);
  if (!job_env) {
    std::fprintf(stderr, "srun: error: the simulated job has ended (%s is gone)\n", (dir + kJobEnv).c_str());
    return kExitFailure;
  }
  std::map<std::string, std::string> job;
  for (std::string line; std::getline(job_env, line);) job[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  if (!jobid.empty() && jobid != job["SLURM_JOB_ID"]) {
    std::fprintf(stderr, "srun: error: --jobid=%s: this simulated cluster runs job %s\n", jobid.c_str(), job["SLURM_JOB_ID"].c_str());
    return kExitFailure;
  }
  for (const auto& [k, v] : job) env[k] = v;
  const std::vector<std::string> hosts = expand_hostlist(job["SLURM_JOB_NODELIST"]);
  const int job_nodes = static_cast<int>(hosts.size());
  if (!ntasks) ntasks = nodes ? *nodes : std::atoi(job["SLURM_NTASKS"].c_str());
  if (!nodes) nodes = std::min(*ntasks, job_nodes - relative);
  if (*nodes < 1 || *ntasks < *nodes || relative < 0 || relative + *nodes > job_nodes) {
    return srun_usage("--nodes " + std::to_string(*nodes) + ", --ntasks " + std::to_string(*ntasks) + " and --relative " +
                      std::to_string(relative) + " do not fit the job's " + std::to_string(job_nodes) + " node(s)");
  }
  const int step = next_step_id(dir), per_node = (*ntasks + *nodes - 1) / *nodes;
  std::string step_nodes;
  for (int k = 0; k < *nodes; ++k) step_nodes += (k ? "," : "") + hosts[relative + k];
  // Registered for the job's end when started from another shell (inside the script, its process group is).
  const std::string registered = dir + kSteps + "/" + std::to_string(::getpid());
  if (!jobid.empty()) std::ofstream(registered) << step << "\n";
  sigset_t forward, previous;
  sigemptyset(&forward);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) sigaddset(&forward, sig);
  sigprocmask(SIG_BLOCK, &forward, &previous);
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < *ntasks; ++r) {
    const int node = relative + r / per_node;
    std::map<std::string, std::string> task = env;
    for (const auto& [k, v] : std::map<std::string, std::string>{
             {"SLURM_STEP_ID", std::to_string(step)}, {"SLURM_STEPID", std::to_string(step)}, {"SLURM_PROCID", std::to_string(r)},
             {"SLURM_LOCALID", std::to_string(r % per_node)}, {"SLURM_NODEID", std::to_string(node)},
             {"SLURMD_NODENAME", hosts[node]}, {"SLURM_STEP_NODELIST", step_nodes}, {"SLURM_NTASKS", std::to_string(*ntasks)},
             {"SLURM_STEP_NUM_TASKS", std::to_string(*ntasks)}, {"SLURM_STEP_NUM_NODES", std::to_string(*nodes)}}) {
      task[k] = v;
    }
    if (!name.empty()) task["SLURM_JOB_NAME"] = name;
    std::vector<std::string> kvs;
    for (const auto& [k, v] : task) kvs.push_back(k + "=" + v);
    const pid_t parent = ::getpid(), pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // as slurmstepd takes its tasks with it
      if (::getppid() != parent) ::_exit(1);
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      std::vector<char*> envp, args;
      for (auto& kv : kvs) envp.push_back(kv.data());
      envp.push_back(nullptr);
      for (int k = i; k < argc; ++k) args.push_back(argv[k]);
      args.push_back(nullptr);
      ::execvpe(argv[i], args.data(), envp.data());
      std::fprintf(stderr, "srun: error: %s: task %d: execve %s: %s\n", hosts[node].c_str(), r, argv[i], std::strerror(errno));
      ::_exit(2);
    }
    pids.push_back(pid);
  }
  // Wait, passing on the signals the job gets; a task killed by a signal ends the step.
  int code = 0;
  size_t left = pids.size();
  while (left > 0) {
    const timespec tick{0, 50'000'000};
    const int sig = sigtimedwait(&forward, nullptr, &tick);
    if (sig > 0) for (pid_t p : pids) if (p > 0) ::kill(p, sig);
    for (size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (pids[r] <= 0 || ::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      pids[r] = -1, --left;
      const std::string host = hosts[relative + static_cast<int>(r) / per_node];
      if (WIFSIGNALED(status)) {
        std::fprintf(stderr, "srun: error: %s: task %zu: %s\n", host.c_str(), r, strsignal(WTERMSIG(status)));
        code = std::max(code, 128 + WTERMSIG(status));
        for (pid_t p : pids) if (p > 0) ::kill(p, SIGKILL);  // the step ends with it
      } else if (WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "srun: error: %s: task %zu: Exited with exit code %d\n", host.c_str(), r, WEXITSTATUS(status));
        code = std::max(code, WEXITSTATUS(status));
      }
    }
  }
  if (!jobid.empty()) ::unlink(registered.c_str());
  return code;
}

}  // namespace ddp
