// 02_spawn: one program starts N workers, gives each its rank, and reports who failed.
//
// The lesson: what torch.multiprocessing.spawn and torchrun do for you. The launcher forks
// the workers before LibTorch runs anything, hosts the store on a port the OS picks (so two
// runs never clash), hands each worker its rank, local rank and node rank, and watches them:
// when one fails it stops the others and prints who failed first and why. With --max-restarts
// it then starts them all again, as torchrun does (step 6). With --link each simulated node
// becomes a host of its own, on a link of that bandwidth (step 1b, Note [Nodes as hosts]).
//
// Usage:
//   ./build/02_spawn --world-size 8
//   ./build/02_spawn --nnodes 2 --nproc-per-node 4        # two "nodes" simulated on one machine
//   ./build/02_spawn --world-size 4 --fail-rank 2 --fail-mode kill   # watch a failure reported
//   ./build/02_spawn --world-size 3 --fail-rank 1 --fail-mode straggle --straggle-ms 4000 --timeout 2
//                                      # ... and the others' flight recorders name the rank behind
//   ./build/02_spawn --world-size 2 -- ./build/01_join_group         # any program as the workers
//   ./build/02_spawn --world-size 2 --fail-rank 1 --max-restarts 1   # fails once, then all start again
//   ./build/02_spawn --nnodes 2 --nproc-per-node 1 --link 100mbit -- ./build/05_ddp   # nodes as hosts (root)
//
// Expected output (--nnodes 2 --nproc-per-node 2; worker lines interleave):
//   [launcher] starting 4 workers (2 nodes x 2 per node), store on 127.0.0.1:41873 (port chosen by the OS)
//   [rank 2/4] node 1, local rank 0: Rank 2 has joined the process group!
//   [rank 0/4] check: all-reduce(SUM) of the ranks = 6, n(n-1)/2 = 6: OK
//   ...
//   [launcher] all 4 workers exited 0 in 0.9s

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/basics/cli.h"
#include "common/launch/error_file.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/group/process_group.h"
#include "common/group/self_check.h"
#include "common/hosts/simulated_hosts.h"

namespace {

struct Worker {
  int rank = 0, node = 0, local = 0;
  int attempt = 0;         // 0, then 1, 2, ... after each restart (TORCHELASTIC_RESTART_COUNT)
  pid_t pid = -1;
  int port_fd = -1;        // the launcher's end of the pipe that carries the store's port
  std::string error_file;  // where the worker writes why it failed (TORCHELASTIC_ERROR_FILE)
  bool done = false, stopped_by_launcher = false;
  int status = 0;
  double when = 0;
  // Exit 75: stopped on a preemption signal after a checkpoint; not a failure (05_ddp, chapter 06).
  bool preempted() const { return done && WIFEXITED(status) && WEXITSTATUS(status) == ddp::kExitPreempted; }
  bool failed() const { return done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !preempted(); }
};

// Waits for the launcher to say which port the OS gave its store.
int receive_port(int port_fd, const ddp::RankInfo& info) {
  pollfd p{port_fd, POLLIN, 0};
  int port = 0;
  if (::poll(&p, 1, static_cast<int>(info.timeout().count())) != 1 || ::read(port_fd, &port, sizeof(port)) != sizeof(port)) {
    throw ddp::JoinError("the launcher did not send the store's port (it failed or was stopped)");
  }
  return port;
}

// 3. The worker: everything chapter 01 did, but its rank comes from the launcher.
// A fault injected on purpose into one worker (--fail-rank, --fail-mode, --straggle-ms).
struct Fault {
  std::optional<int> rank;
  std::string mode = "exit";  // exit | kill | hang | straggle
  int straggle_ms = 3000;
};

int run_worker(const Worker& w, ddp::RankInfo info, int nproc, int port_fd, const Fault& fault, bool as_host) {
  const std::string who = "assigned by 02_spawn";
  info.rank = {w.rank, who};
  info.local_rank = {w.local, who};
  info.local_world_size = {nproc, who};
  info.node_rank = {w.node, who};
  info.external_store = {true, who};  // the launcher hosts the store: rank 0 connects like the others
  ddp::set_log_identity(w.rank, info.world_size.value);
  return ddp::guarded_main([&] {
    if (info.backend.source != "--backend") ddp::choose_default_backend(info, ddp::visible_gpus());
    ddp::log_backend_note(info);
    info.master_port = {receive_port(port_fd, info), who + " (OS-chosen port of the launcher's store)"};
    ddp::Group g = ddp::init_process_group(info);
    const std::string host = as_host ? " (host " + ddp::hostname() + ")" : "";  // --link: the node's own name
    ddp::log("node " + std::to_string(w.node) + host + ", local rank " + std::to_string(w.local) + ": Rank " +
             std::to_string(w.rank) + " has joined the process group!");

    // The survivors of a fault say which rank is gone or behind: see Note [Flight recorder].
    ddp::FlightRecorder recorder(g);
    if (fault.rank == w.rank && w.attempt == 0) {  // a fault on purpose, to see it reported (and restarted)
      ddp::log("injecting fault: --fail-mode " + fault.mode);
      if (fault.mode == "exit") {
        ddp::write_error_file("injected fault: exit code 3 (--fail-rank " + std::to_string(w.rank) + " --fail-mode exit)");
        return 3;
      }
      if (fault.mode == "kill") ::raise(SIGKILL);  // dies at once, like a segfault or the OOM killer
      if (fault.mode == "straggle") {              // late to the all-reduce by --straggle-ms
        std::this_thread::sleep_for(std::chrono::milliseconds(fault.straggle_ms));
      } else {
        while (true) ::pause();  // "hang": alive, but never joins the all-reduce
      }
    }
    ddp::check_sum_of_ranks(g);
    return ddp::kExitOk;
  });
}

// 3b. Or the worker is another program (02_spawn ... -- ./03_manual_allreduce): it gets its
//     rank the way torchrun passes it, in the environment, and replaces this process (exec).
//     A fresh program image: none of the launcher's state, so nothing to be careful about.
int exec_worker(const Worker& w, const ddp::RankInfo& info, int nproc, int port_fd, std::vector<std::string> command) {
  ddp::set_log_identity(w.rank, info.world_size.value);
  return ddp::guarded_main([&]() -> int {
    const int port = receive_port(port_fd, info);
    const std::pair<const char*, std::string> env[] = {
        {"RANK", std::to_string(w.rank)},         {"WORLD_SIZE", std::to_string(info.world_size.value)},
        {"LOCAL_RANK", std::to_string(w.local)},  {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
        {"GROUP_RANK", std::to_string(w.node)},   {"MASTER_ADDR", info.master_addr.value},
        {"MASTER_PORT", std::to_string(port)},    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(w.attempt)}};
    for (const auto& [k, v] : env) ::setenv(k, v.c_str(), 1);
    // Simulated nodes share this host's GPUs (Note [Choosing the backend]).
    if (info.simulated_nodes > 1) ::setenv("DDP_SIMULATED_NODES", std::to_string(info.simulated_nodes).c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : command) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    throw ddp::UsageError("cannot start '" + command[0] + "': " + std::strerror(errno));
  });
}

std::string describe_status(const Worker& w) {
  if (WIFEXITED(w.status)) return "exit " + std::to_string(WEXITSTATUS(w.status));
  const int sig = WTERMSIG(w.status);
  std::string s = "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  if (w.stopped_by_launcher && (sig == SIGTERM || sig == SIGKILL)) s += ", stopped by launcher";
  return s;
}

// What an attempt ended with: its exit code, and whether a restart could help (not after a
// preemption, a stop signal, or a store that could not start).
struct Outcome {
  int code = 0;
  bool final = false;
};

// The plan of step 1, the same for every attempt.
struct Plan {
  ddp::RankInfo base;
  int world = 0, n_nodes = 0, per_node = 0;
  bool os_port = true;
  std::vector<std::string> command;
  Fault fault;
  double grace_s = 5;
  std::string on_failure;
  int max_restarts = 0;
  const ddp::SimulatedHosts* hosts = nullptr;  // --link: each node a host (step 1b)
};

// Steps 2-5: one attempt of the whole world, from fork to report.
Outcome run_attempt(const Plan& plan, int attempt, const sigset_t& watched, const sigset_t& previous) {
  const ddp::RankInfo& base = plan.base;
  const int world = plan.world, n_nodes = plan.n_nodes, per_node = plan.per_node;
  const bool os_port = plan.os_port;
  const std::vector<std::string>& command = plan.command;

  // 2. Fork the workers before LibTorch computes anything or starts a thread. A child gets
  //    a copy of the parent's memory but only the thread that called fork(): a lock held by
  //    any other thread (an OpenMP pool, the store's server) stays locked in the child for
  //    ever. See the README, "Why fork first". On a restart the last attempt's store is gone,
  //    its server thread with it (step 3's store lives in this function): one thread again.
  char dir_template[] = "/tmp/02_spawn_XXXXXX";  // the workers' error files
  const std::string error_dir = ::mkdtemp(dir_template) ? dir_template : throw std::runtime_error("mkdtemp failed");
  std::vector<Worker> workers(world);
  const pid_t launcher = ::getpid();
  std::fflush(nullptr);  // or each child would print the parent's buffered output again
  for (int r = 0; r < world; ++r) {
    Worker& w = workers[r];
    w.rank = r, w.node = r / per_node, w.local = r % per_node, w.attempt = attempt;
    w.error_file = error_dir + "/rank" + std::to_string(r) + ".json";
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    w.pid = ::fork();
    if (w.pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (w.pid == 0) {  // the child
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher (no orphans on a GPU)
      if (::getppid() != launcher) ::_exit(1);
      if (plan.hosts && !plan.hosts->enter(w.node)) {  // --link: a process of its node's host from here on
        std::perror("02_spawn: could not enter the node's namespaces");
        ::_exit(1);
      }
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      ::close(fds[1]);
      for (int k = 0; k < r; ++k) ::close(workers[k].port_fd);  // siblings' pipes
      ::setenv(ddp::kErrorFileVar, w.error_file.c_str(), 1);
      // _exit, not exit: skip static destructors of state copied from the parent.
      ::_exit(command.empty() ? run_worker(w, base, per_node, fds[0], plan.fault, plan.hosts != nullptr)
                              : exec_worker(w, base, per_node, fds[0], command));
    }
    ::close(fds[0]);
    w.port_fd = fds[1];
  }

  // 3. Host the store. Port 0 asks the OS for a free one; getPort() says which.
  const double t0 = ddp::monotonic_seconds();
  c10::intrusive_ptr<c10d::TCPStore> store;
  int port = 0;
  if (!base.file_init()) {
    c10d::TCPStoreOptions so;
    so.port = os_port ? 0 : static_cast<std::uint16_t>(base.master_port.value);
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = base.timeout();
    try {
      // With --link the store listens on node 0, as torchrun's agent on the first node does.
      auto host = [&] { store = c10::make_intrusive<c10d::TCPStore>(base.master_addr.value, so); };
      plan.hosts ? plan.hosts->in_network_of(0, host) : host();
      port = store->getPort();
    } catch (const std::exception& e) {
      ddp::log_error("could not host the store on port " + std::to_string(so.port) + ": " + ddp::short_what(e) +
                     (os_port ? "" : " (leave --master-port unset to let the OS choose)"));
    }
  }
  const std::string of_attempts =
      plan.max_restarts > 0 ? ", attempt " + std::to_string(attempt + 1) + " of at most " + std::to_string(plan.max_restarts + 1) : "";
  ddp::log("starting " + std::to_string(world) + " workers (" + std::to_string(n_nodes) + " node(s) x " +
           std::to_string(per_node) + " per node" + of_attempts + "), " +
           (base.file_init() ? "store " + base.init.value
                             : "store on " + base.master_addr.value + ":" + std::to_string(port) +
                                   (os_port ? " (port chosen by the OS)" : "")));
  for (Worker& w : workers) {
    // Without a store (port 0 stays 0) a worker reads nothing and fails, naming the cause.
    if (port != 0 || base.file_init()) (void)!::write(w.port_fd, &port, sizeof(port));
    ::close(w.port_fd);
  }

  // 4. Watch. The first worker to fail stops the run: the others get SIGTERM, and SIGKILL
  //    after --grace seconds. SIGINT/SIGTERM/SIGUSR1/SIGUSR2 sent to the launcher are passed
  //    on to the workers (a scheduler's preemption signal must reach them).
  int alive = world;
  int stop_signal = 0;  // a SIGINT/SIGTERM the launcher received and passed on
  bool stopping = false;
  double kill_at = INFINITY;
  auto stop_all = [&](double t) {
    if (stopping) return;
    stopping = true;
    kill_at = t + plan.grace_s;
    for (Worker& w : workers) {
      if (!w.done) ::kill(w.pid, SIGTERM), w.stopped_by_launcher = true;
    }
  };
  while (alive > 0) {
    timespec tick{0, 100'000'000};
    siginfo_t si{};
    const int sig = sigtimedwait(&watched, &si, &tick);
    const double t = ddp::monotonic_seconds();
    if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2) {
      ddp::log(std::string("received ") + strsignal(sig) + ", passing it on to the workers");
      for (Worker& w : workers) {
        if (!w.done) ::kill(w.pid, sig);
      }
      if (sig == SIGINT || sig == SIGTERM) stop_signal = sig, stop_all(t);
    }
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      for (Worker& w : workers) {
        if (w.pid != pid) continue;
        w.done = true, w.status = status, w.when = t, --alive;
        if (w.failed() && !stopping && plan.on_failure == "stop") {
          ddp::log("rank " + std::to_string(w.rank) + " failed (" + describe_status(w) + "): stopping the others");
          stop_all(t);
        }
      }
    }
    if (stopping && t > kill_at) {
      for (Worker& w : workers) {
        if (!w.done) ::kill(w.pid, SIGKILL);
      }
    }
  }

  // 5. Report. Each failed worker left its cause in its error file; a worker that died by a
  //    signal could not. The first failure is the earliest time a worker recorded or was
  //    reaped; workers the launcher stopped itself are consequences, not causes.
  std::vector<std::string> causes(world, "-");
  for (Worker& w : workers) {
    if (auto rec = ddp::read_error_file(w.error_file)) {
      causes[w.rank] = rec->message;
      if (rec->monotonic_s > 0) w.when = std::min(w.when, rec->monotonic_s);
    }
    std::remove(w.error_file.c_str());
  }
  ::rmdir(error_dir.c_str());
  const Worker* first = nullptr;
  int n_failed = 0;
  for (Worker& w : workers) {
    const bool own_failure = w.failed() && !(WIFSIGNALED(w.status) && w.stopped_by_launcher &&
                                             (WTERMSIG(w.status) == SIGTERM || WTERMSIG(w.status) == SIGKILL));
    if (!own_failure) continue;
    ++n_failed;
    if (!first || w.when < first->when) first = &w;
  }
  const bool all_ok = std::none_of(workers.begin(), workers.end(), [](const Worker& w) { return w.failed(); });
  if (all_ok && std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.preempted(); })) {
    ddp::log("the workers stopped for preemption (exit 75) after writing a checkpoint: run again to resume");
    return {ddp::kExitPreempted, true};
  }
  if (all_ok) {
    ddp::log("all " + std::to_string(world) + " workers exited 0 in " + ddp::seconds(ddp::monotonic_seconds() - t0));
    return {port != 0 || base.file_init() ? ddp::kExitOk : ddp::kExitFailure, port == 0 && !base.file_init()};
  }
  std::string table = first ? std::to_string(n_failed) + " of " + std::to_string(world) +
                                  " workers failed; first: rank " + std::to_string(first->rank)
                            : std::string("the run was stopped: the launcher received ") + strsignal(stop_signal);
  table += "\n  rank  node  local  pid      +time    result                                        cause\n";
  for (const Worker& w : workers) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-4d%s %-5d %-6d %-8d %-8s %-45s ", w.rank, &w == first ? "*" : " ", w.node,
                  w.local, w.pid, ddp::seconds(w.when - t0).c_str(), describe_status(w).c_str());
    table += line + causes[w.rank] + "\n";  // a cause of any length (the flight recorder's are long)
  }
  ddp::log_error(table + "  (* = first failure; +time since start)");
  if (!first) return {128 + stop_signal, true};
  if (WIFEXITED(first->status)) return {WEXITSTATUS(first->status), false};
  return {128 + WTERMSIG(first->status), false};  // the shell's convention for "killed by signal N"
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"02_spawn: fork N workers that join one process group; report who failed"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  std::optional<int> nnodes, nproc;
  Fault fault;
  double grace_s = 5;
  app.add_option("--nnodes", nnodes, "Simulated nodes [default: 1]");
  app.add_option("--nproc-per-node", nproc, "Workers per simulated node [default: world-size / nnodes, else 2]");
  app.add_option("--fail-rank", fault.rank, "Make this rank fail on purpose after joining");
  app.add_option("--fail-mode", fault.mode,
                 "How --fail-rank fails: exit (code 3), kill (SIGKILL), hang (skips the all-reduce), straggle (late by --straggle-ms)")
      ->check(CLI::IsMember({"exit", "kill", "hang", "straggle"}));
  app.add_option("--straggle-ms", fault.straggle_ms, "How late --fail-mode straggle comes to the all-reduce")
      ->check(CLI::PositiveNumber);
  int max_restarts = 0;
  app.add_option("--max-restarts", max_restarts, "When a worker fails, stop all and start all again, up to N times (torchrun's)")
      ->check(CLI::NonNegativeNumber);
  std::optional<std::string> link;
  app.add_option("--link", link, "Each node a host with its own address, on a link of this bandwidth (e.g. 100mbit, 1gbit); needs root");
  app.add_option("--grace", grace_s, "Seconds the others get after SIGTERM before SIGKILL");
  std::string on_failure = "stop";
  app.add_option("--on-failure", on_failure, "When a worker fails: stop the others (torchrun's way), or wait and watch them fail by themselves")
      ->check(CLI::IsMember({"stop", "wait"}));
  // Everything after "--" is a program to run as each worker, as with torchrun --no-python.
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    command.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("launcher");

  return ddp::guarded_main([&] {
    // 1. The plan: how many workers, and which node and local rank each one gets.
    if (flags.rank) throw ddp::UsageError("--rank: 02_spawn gives its workers their ranks; --rank is for programs started once per rank");
    const int n_nodes = nnodes.value_or(1);
    if (n_nodes < 1) throw ddp::UsageError("--nnodes must be at least 1");
    const int per_node = nproc.value_or(flags.world_size ? *flags.world_size / n_nodes : 2);
    const int world = flags.world_size.value_or(n_nodes * per_node);
    if (per_node < 1 || world != n_nodes * per_node) {
      throw ddp::UsageError("--world-size " + std::to_string(world) + " is not --nnodes " + std::to_string(n_nodes) +
                            " x --nproc-per-node " + std::to_string(per_node));
    }
    if (fault.rank && (*fault.rank < 0 || *fault.rank >= world)) throw ddp::UsageError("--fail-rank must be in 0.." + std::to_string(world - 1));
    if (!(grace_s >= 0)) throw ddp::UsageError("--grace must be >= 0");
    if (!command.empty() && fault.rank) throw ddp::UsageError("--fail-rank works with the built-in worker, not with a program after --");
    ddp::CommonFlags base_flags = flags;
    base_flags.rank = 0;
    base_flags.world_size = world;
    // No GPU count here: CUDA started before fork() is unusable in the children. Without
    // --backend each worker chooses from its own GPUs (Note [Choosing the backend]).
    ddp::RankInfo base = ddp::resolve_rank_info(base_flags, ddp::process_env(), [] { return ddp::GpuCount{0, "(not counted by the launcher)"}; });
    if (!flags.backend) base.backend = {"gloo", "default: each worker chooses, from the GPUs it sees"};
    const std::string plan_src = flags.world_size ? "--world-size" : "--nnodes x --nproc-per-node";
    base.world_size.source = plan_src;
    base.rank.source = base.local_rank.source = base.node_rank.source = "assigned to each worker by 02_spawn";
    base.local_world_size = {per_node, plan_src};
    base.external_store = {true, "02_spawn hosts the store"};
    base.simulated_nodes = n_nodes;  // they all share this host's GPUs
    // 1b. --link: each node a host of its own, node 0's address the master's (Note [Nodes as hosts]).
    double link_bits = 0;
    if (link) {
      link_bits = ddp::parse_link_rate(*link);
      if (flags.master_addr) throw ddp::UsageError("--link: the store is on node 0's address; leave --master-addr out");
      base.master_addr = {ddp::SimulatedHosts::address(0), "--link: node 0's address"};
    }
    ddp::validate(base);
    if (!command.empty() && base.file_init()) throw ddp::UsageError("--init file:// is for the built-in worker; give it to the program after -- instead");
    if (max_restarts > 0 && base.file_init()) {
      throw ddp::UsageError("--max-restarts starts each attempt with a fresh store; a --init file:// would keep the failed attempt's keys");
    }
    // An explicit --master-port or MASTER_PORT is honoured; otherwise the OS picks one.
    const bool os_port = base.master_port.source == "default";
    if (flags.explain_env) {
      std::printf("%s  launch plan: %d node(s) x %d per node = world size %d, store on %s:%s\n", ddp::explain(base).c_str(),
                  n_nodes, per_node, world, base.master_addr.value.c_str(),
                  os_port ? "<port chosen by the OS>" : std::to_string(base.master_port.value).c_str());
      for (int r = 0; r < world; ++r) std::printf("    rank %d: node %d, local rank %d\n", r, r / per_node, r % per_node);
      return ddp::kExitOk;
    }

    // The signals the launcher watches are delivered to sigtimedwait() in step 4, not to handlers.
    sigset_t watched, previous;
    sigemptyset(&watched);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaddset(&watched, s);
    sigprocmask(SIG_BLOCK, &watched, &previous);
    std::unique_ptr<ddp::SimulatedHosts> hosts;
    if (link) {
      hosts = std::make_unique<ddp::SimulatedHosts>(n_nodes, link_bits);
      std::string names;
      for (int k = 0; k < n_nodes; ++k) names += (k ? ", " : "") + hosts->name(k) + " " + hosts->address(k);
      ddp::log(std::to_string(n_nodes) + " node(s) as hosts on " + ddp::describe_rate(link_bits) + " links to one bridge: " + names);
    }
    const Plan plan{base, world, n_nodes, per_node, os_port, command, fault, grace_s, on_failure, max_restarts, hosts.get()};

    // 6. Restarts, torchrun's --max-restarts: when an attempt fails, all its workers have been
    //    stopped (step 4); start them all again, with a fresh store, up to N times. There is no
    //    partial restart: the survivors' group lost a member and cannot go on. The workers learn
    //    the attempt from TORCHELASTIC_RESTART_COUNT; a trainer resumes from its last checkpoint
    //    (chapter 05), losing the steps since. Each attempt's report stays in the log above.
    for (int attempt = 0;; ++attempt) {
      const Outcome o = run_attempt(plan, attempt, watched, previous);
      if (o.code == ddp::kExitOk || o.final || attempt == max_restarts) {
        if (attempt > 0 && o.code != ddp::kExitOk && !o.final) ddp::log_error("no restarts left (--max-restarts " + std::to_string(max_restarts) + ")");
        return o.code;
      }
      ddp::log("attempt " + std::to_string(attempt + 1) + " failed (exit " + std::to_string(o.code) + "): restarting all " +
               std::to_string(world) + " workers (restart " + std::to_string(attempt + 1) + " of " + std::to_string(max_restarts) + ")");
    }
  });
}
