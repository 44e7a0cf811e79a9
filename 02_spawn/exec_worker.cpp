// provides: 02_spawn's worker side of the store's port, and any program as the worker (step 3b).
#include "02_spawn/exec_worker.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace spawn {

// Note [A program as the workers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `02_spawn --world-size 2 -- ./build-cpu/01_join_group` runs any program as the workers, as
// `torchrun --no-python` does. The program learns who it is from the variables torchrun sets:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), MASTER_ADDR and
// MASTER_PORT (the launcher's store), TORCHELASTIC_USE_AGENT_STORE=True (rank 0 joins that store
// instead of hosting one) and TORCHELASTIC_RESTART_COUNT (the attempt, Note [Restarts]); every
// chapter reads them (common/launch/rank_env.cpp). The child then replaces itself with the
// program (execvp): a fresh program image keeps none of the launcher's state, so fork + exec is
// always safe, whatever threads the launcher had.

// Note [The worker in place]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// `05_ddp --nproc-per-node 2` links this launcher and is its own command: starting the program
// again in each child would load LibTorch again (0.4 s of CPU a process with Debian's, 287
// libraries), only to reach the state the child already has. So the child runs the rank's code
// where it is, as chapter 01's workers do (main.cpp, step 3): the same variables set first, so
// that the rank resolves its rank, world and store exactly as the exec'd program would. It is
// safe for the same reason ("Fork first", README): the launcher has parsed its flags and started
// nothing (no CUDA, no thread) before it forks.

namespace {
std::function<int()> g_in_place;  // set by run_workers_in_place()
}  // namespace

void run_workers_in_place(std::function<int()> rank) { g_in_place = std::move(rank); }

int receive_port(int port_fd, const ddp::RankInfo& info) {
  pollfd p{port_fd, POLLIN, 0};
  int port = 0;
  if (::poll(&p, 1, static_cast<int>(info.timeout().count())) != 1 || ::read(port_fd, &port, sizeof(port)) != sizeof(port)) {
    throw ddp::JoinError("the launcher did not send the store's port (it failed or was stopped)");
  }
  return port;
}

int exec_worker(const Worker& w, const ddp::RankInfo& info, int nproc, int port_fd, const std::vector<std::string>& command) {
  ddp::set_log_identity(w.rank, info.world_size.value);
  const int code = ddp::guarded_main([&]() -> int {
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
    if (g_in_place) return g_in_place();  // Note [The worker in place]
    std::vector<std::string> words = command;  // execvp wants char*, not const char*
    std::vector<char*> argv;
    for (auto& a : words) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    throw ddp::UsageError("cannot start '" + command[0] + "': " + std::strerror(errno));
  });
  std::fflush(nullptr);  // a worker in place returns here, and the child ends in _exit(), which flushes nothing
  return code;
}

}  // namespace spawn
