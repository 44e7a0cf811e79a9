// 02_spawn: one program starts N workers, gives each its rank, and reports who failed.
//
// The lesson: what torch.multiprocessing.spawn and torchrun do for you. The launcher makes a plan
// (1) and forks the workers before LibTorch runs anything (2); each child becomes a worker (3),
// chapter 01 with its rank handed over. Meanwhile the launcher hosts the store on a port the OS
// picks (4), watches the workers (5) and, when one fails, stops the others and reports who failed
// first and why (6). What the steps call lives beside this file, each part with its Note.
//
// Usage:
//   ./build-cpu/02_spawn --nnodes 2 --nproc-per-node 2              # two "nodes" simulated on one machine
//   ./build-cpu/02_spawn --world-size 4 --fail-rank 2 --fail-mode kill   # watch a failure reported
//   ./build-cpu/02_spawn --world-size 2 -- ./build-cpu/01_join_group     # any program as the workers
//
// Expected output (--nnodes 2 --nproc-per-node 2; the workers' lines interleave):
//   [launcher] starting 4 workers (2 node(s) x 2 per node), store on 127.0.0.1:43929 (port chosen by the OS)
//   [rank 0/4] node 0, local rank 0: Rank 0 has joined the process group!
//   [rank 0/4] check: all-reduce(SUM) of the ranks = 6, n(n-1)/2 = 6: OK
//   [rank 0/4] all 4 ranks passed the check
//   [launcher] all 4 workers exited 0 in 0.197s

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "02_spawn/busy_port.h"
#include "02_spawn/exec_worker.h"
#include "02_spawn/plan.h"
#include "02_spawn/report.h"
#include "02_spawn/restarts.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/group/self_check.h"
#include "common/launch/error_file.h"
#include "common/launch/net.h"
#include "common/observe/flight_recorder.h"

namespace {
using spawn::Plan, spawn::Worker;
spawn::Outcome run_attempt(const Plan& plan, int attempt);     // steps 2 to 6, below main
int run_worker(const Worker& w, const Plan& plan, int port_fd);  // step 3, in each child
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"02_spawn: fork N workers that join one process group; report who failed"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  Plan plan;
  spawn::add_plan_flags(app, plan);  // --nnodes, --nproc-per-node, --grace, --on-failure, ... (plan.cpp)
  plan.command = spawn::program_after_dashes(argc, argv);  // 02_spawn ... -- PROGRAM ARGS: see step 3
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("launcher");

  return ddp::guarded_main([&] {
    // 1. The plan: --nnodes N x --nproc-per-node P workers; worker r runs on node r / P as local
    //    rank r % P. plan.cpp refuses what cannot run; plan.base is what every worker starts from.
    spawn::make_plan(flags, plan);
    if (flags.explain_env) return spawn::explain_plan(plan), ddp::kExitOk;
    if (!plan.os_port && !plan.links.on() && !plan.base.file_init()) spawn::refuse_busy_port(plan.base);  // Note [A port given by hand]
    // The signals step 5 waits for. sigprocmask() blocks them: each stays pending until step 5's
    // sigtimedwait() takes it, so no handler interrupts the launcher and no worker's end is missed.
    sigemptyset(&plan.watched);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaddset(&plan.watched, s);
    sigprocmask(SIG_BLOCK, &plan.watched, &plan.previous);
    plan.links.start(plan.n_nodes);  // --link only: one host per node (Note [Nodes on links])
    // Each attempt runs steps 2 to 6; with --max-restarts a failed one starts all again (Note [Restarts]).
    return spawn::run_with_restarts(plan.max_restarts, plan.world, [&](int attempt) { return run_attempt(plan, attempt); });
  });
}

namespace {

// 2. Fork the workers while the launcher has one thread (README, "Fork first"): before LibTorch
//    computes anything and, on a restart, once the last attempt's store and its thread are gone.
std::vector<Worker> fork_workers(const Plan& plan, int attempt, const std::string& error_dir) {
  std::vector<Worker> workers(plan.world);
  const pid_t launcher = ::getpid();
  std::fflush(nullptr);  // or each child would print the parent's buffered output again
  for (int r = 0; r < plan.world; ++r) {
    Worker& w = workers[r];
    w.rank = r, w.node = r / plan.per_node, w.local = r % plan.per_node, w.attempt = attempt;
    w.error_file = error_dir + "/rank" + std::to_string(r) + ".json";
    int fds[2];  // a pipe: step 4 writes the store's port into fds[1], the worker reads fds[0]
    if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    w.pid = ::fork();  // returns twice: the child's pid in the launcher, 0 in the child
    if (w.pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (w.pid == 0) {  // the child
      // prctl: the kernel kills this child when the launcher dies (no orphan keeps a GPU); if
      // it died before we asked, our parent is already another process: leave.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(1);
      // --link only: enter the node's namespaces (network, host name): a process of that host.
      if (!plan.links.enter(w.node)) std::perror("02_spawn: could not enter the node's namespaces"), ::_exit(1);
      sigprocmask(SIG_SETMASK, &plan.previous, nullptr);  // unblock step 1's signals: SIGTERM stops a worker
      // A pipe reports its end once every writer closed it: keep no write end (ours, the siblings'),
      // so that a launcher that dies or sends nothing ends the worker's wait at once.
      ::close(fds[1]);
      for (int k = 0; k < r; ++k) ::close(workers[k].port_fd);
      ::setenv(ddp::kErrorFileVar, w.error_file.c_str(), 1);  // where it writes why it failed (step 6)
      // _exit, not exit: skip static destructors of state copied from the parent.
      ::_exit(plan.command.empty() ? run_worker(w, plan, fds[0]) : spawn::exec_worker(w, plan.base, plan.per_node, fds[0], plan.command));
    }
    ::close(fds[0]);  // the worker's end
    w.port_fd = fds[1];
  }
  return workers;
}

// 3. The worker, in each child: chapter 01, its rank from the launcher (or any program, its rank
//    in the environment: Note [A program as the workers]). It waits for step 4's store port.
int run_worker(const Worker& w, const Plan& plan, int port_fd) {
  ddp::RankInfo info = plan.base;
  const std::string who = "assigned by 02_spawn";
  info.rank = {w.rank, who}, info.local_rank = {w.local, who}, info.node_rank = {w.node, who};
  info.local_world_size = {plan.per_node, who};
  info.external_store = {true, who};  // the launcher hosts the store: rank 0 connects like the others
  ddp::set_log_identity(w.rank, info.world_size.value);
  return ddp::guarded_main([&] {
    if (info.backend.source != "--backend") ddp::choose_default_backend(info, ddp::visible_gpus());
    ddp::log_backend_note(info);
    info.master_port = {spawn::receive_port(port_fd, info), who + " (OS-chosen port of the launcher's store)"};
    ddp::Group g = ddp::init_process_group(info);
    const std::string host = plan.links.on() ? " (host " + ddp::hostname() + ")" : "";  // --link: its node's name
    ddp::log("node " + std::to_string(w.node) + host + ", local rank " + std::to_string(w.local) + ": Rank " +
             std::to_string(w.rank) + " has joined the process group!");
    ddp::FlightRecorder recorder(g);  // the survivors of a fault name the rank gone or behind: Note [Flight recorder]
    if (const auto code = spawn::inject_fault(plan.fault, g, w.attempt)) return *code;  // --fail-rank: Note [Faults on purpose]
    ddp::check_sum_of_ranks(g);
    return ddp::kExitOk;
  });
}

// One attempt of the whole world, steps 2 to 6, from fork to report.
spawn::Outcome run_attempt(const Plan& plan, int attempt) {
  const ddp::RankInfo& base = plan.base;
  char dir_template[] = "/tmp/02_spawn_XXXXXX";  // a fresh folder for the workers' error files (step 6)
  const std::string error_dir = ::mkdtemp(dir_template) ? dir_template : throw std::runtime_error("mkdtemp failed");
  std::vector<Worker> workers = fork_workers(plan, attempt, error_dir);  // steps 2 and 3

  // 4. Host the store. Port 0 asks the OS for a free one; getPort() says which.
  const double t0 = ddp::monotonic_seconds();
  c10::intrusive_ptr<c10d::TCPStore> store;
  int port = 0;
  if (!base.file_init()) {
    c10d::TCPStoreOptions so;
    so.port = plan.os_port ? 0 : static_cast<std::uint16_t>(base.master_port.value);
    so.isServer = true, so.waitWorkers = false, so.timeout = base.timeout();
    try {  // with --link the store listens on node 0, as torchrun's agent does on the first node
      plan.links.on_node0([&] { store = c10::make_intrusive<c10d::TCPStore>(base.master_addr.value, so); });
      port = store->getPort();
    } catch (const std::exception& e) {
      ddp::log_error("could not host the store on port " + std::to_string(so.port) + ": " + ddp::short_what(e) +
                     (plan.os_port ? "" : " (leave --master-port unset to let the OS choose)"));
    }
  }
  spawn::log_start(plan, attempt, port);  // "starting 4 workers (...), store on 127.0.0.1:<port> ..."
  // Each worker's port through its pipe; without a store (port 0) a closed pipe: the worker fails, saying so.
  for (Worker& w : workers) {
    if (port != 0 || base.file_init()) (void)!::write(w.port_fd, &port, sizeof(port));
    ::close(w.port_fd);
  }

  // 5. Watch. The first worker to fail stops the run: the others get SIGTERM, and SIGKILL
  //    after --grace seconds. SIGINT/SIGTERM/SIGUSR1/SIGUSR2 sent to the launcher are passed
  //    on to the workers (a scheduler's preemption signal must reach them).
  int alive = plan.world, stop_signal = 0;  // stop_signal: a SIGINT/SIGTERM the launcher received and passed on
  bool stopping = false;
  double kill_at = INFINITY;  // when --grace runs out
  auto signal_running = [&](int sig) {  // kill() sends any signal, not only SIGKILL
    for (Worker& w : workers) if (!w.done) ::kill(w.pid, sig);
  };
  auto stop_all = [&](double t) {
    if (stopping) return;
    stopping = true, kill_at = t + plan.grace_s;
    for (Worker& w : workers) w.stopped_by_launcher = w.stopped_by_launcher || !w.done;
    signal_running(SIGTERM);
  };
  while (alive > 0) {
    // Takes one pending signal of step 1's set (SIGCHLD: a worker ended), or none after `tick`:
    timespec tick{0, 100'000'000};  // wake up at least every 0.1 s, to send SIGKILL in time
    siginfo_t si{};
    const int sig = sigtimedwait(&plan.watched, &si, &tick);
    const double t = ddp::monotonic_seconds();
    if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2) {
      ddp::log(std::string("received ") + strsignal(sig) + ", passing it on to the workers");
      signal_running(sig);
      if (sig == SIGINT || sig == SIGTERM) stop_signal = sig, stop_all(t);
    }
    // waitpid(-1, WNOHANG) collects every ended child without blocking: one SIGCHLD may stand for several.
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      for (Worker& w : workers) {
        if (w.pid != pid) continue;
        w.done = true, w.status = status, w.when = t, --alive;
        if (w.failed() && !stopping && plan.on_failure == "stop") {
          ddp::log("rank " + std::to_string(w.rank) + " failed (" + spawn::describe_status(w) + "): stopping the others");
          stop_all(t);
        }
      }
    }
    if (stopping && t > kill_at) signal_running(SIGKILL);
  }

  // 6. Report: who failed first, and why (Note [The root-cause table]); the attempt's exit code.
  return spawn::report(workers, error_dir, t0, stop_signal, port != 0 || base.file_init());
}

}  // namespace
