// provides: the simulated cluster of `06_slurm --local` and its stand-in for scontrol.
#include "06_slurm/local_cluster.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/launch/error_file.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/basics/paths.h"
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
           {"SLURM_CPUS_PER_TASK", std::to_string(spec.cpus_per_task)}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEPID", "0"},
           {"SLURM_SUBMIT_DIR", spec.submit_dir}, {"SLURM_CLUSTER_NAME", "local"}}) {
    base.push_back(k + "=" + v);
  }
  if (restart > 0) base.push_back("SLURM_RESTART_COUNT=" + std::to_string(restart));  // as Slurm: unset at first

  const std::vector<std::string> cmd = spec.task_command(job);
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
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<Task> tasks(spec.world());
  std::fflush(nullptr);  // our buffered lines first: the tasks write to the same stdout
  for (int r = 0; r < spec.world(); ++r) {
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
  log("job " + job + (restart ? " (restart " + std::to_string(restart) + ")" : "") + " running: " + std::to_string(spec.world()) +
      " tasks on " + nodelist + ", tasks per node " + tpn + ", time limit " + spec.time +
      (spec.no_signal ? ", no warning signal" : ", " + spec.signal + " " + std::to_string(spec.signal_before_s) + " s before it"));

  // Watch, as slurmctld and slurmstepd would: the warning, the limit, a requeue, the tasks' ends.
  const double t0 = monotonic_seconds();
  const std::string requeue_note = sim_dir + kRequeueNote;
  posix_spawnattr_destroy(&attr);
  bool warned = spec.no_signal, terminated = false, requeued = false, cancelled = false;
  double kill_at = INFINITY;
  int alive = spec.world();
  auto signal_all = [&](int sig) {
    for (Task& t : tasks) {
      if (!t.done) ::kill(t.pid, sig);
    }
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
  // --link first: refused (not root) before anything is written.
  std::unique_ptr<SimulatedHosts> hosts;
  if (spec.link_bits_per_s > 0) {
    hosts = std::make_unique<SimulatedHosts>(spec.nodes, spec.link_bits_per_s);
    log(std::to_string(spec.nodes) + " node(s) as hosts on " + describe_rate(spec.link_bits_per_s) + " links to one bridge (node0 = " +
        hosts->address(0) + ", ...)");
  }
  char tmpl[] = "/tmp/06_slurm_local_XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string sim_dir = tmpl;
  struct Removed {  // on every way out, an exception's included: no run leaves its folder behind
    std::string dir;
    ~Removed() {
      ::unlink((dir + kRequeueNote).c_str());  // run_once()'s note, when it was cut short
      ::unlink((dir + "/bin/scontrol").c_str());
      ::rmdir((dir + "/bin").c_str());
      ::rmdir(dir.c_str());
    }
  } removed{sim_dir};
  ::mkdir((sim_dir + "/bin").c_str(), 0755);
  if (::symlink(this_program().c_str(), (sim_dir + "/bin/scontrol").c_str()) != 0) {
    throw std::runtime_error("cannot place the stand-in scontrol in " + sim_dir + "/bin");
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

int local_scontrol(int argc, char** argv) {
  const char* dir = std::getenv(kSimDirVar);
  if (argc == 3 && std::string(argv[1]) == "requeue" && dir) {
    std::ofstream(std::string(dir) + kRequeueNote) << argv[2] << "\n";
    return 0;
  }
  std::fprintf(stderr, "scontrol: this is 06_slurm --local's stand-in: only 'scontrol requeue <job id>' inside a local job is simulated\n");
  return 1;
}

}  // namespace ddp
