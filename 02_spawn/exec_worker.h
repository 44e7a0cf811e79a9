// defines: receive_port(), the worker's end of the pipe that carries the store's port (step 4
// of main.cpp), and exec_worker(): step 3b, another program as the worker, given its rank in
// the environment as torchrun gives it. See Note [A program as the workers].
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "02_spawn/report.h"
#include "common/launch/rank_env.h"

namespace spawn {

// Waits (up to the timeout) for the launcher to say which port the OS gave its store; throws
// JoinError, naming the cause, when the launcher sends none.
int receive_port(int port_fd, const ddp::RankInfo& info);

// In a worker just forked: waits for the store's port, sets torchrun's variables and replaces
// this process with `command` (execvp). Returns only when that fails: exit 2, saying why.
int exec_worker(const Worker& w, const ddp::RankInfo& base, int per_node, int port_fd, const std::vector<std::string>& command);

// For a program that links this launcher and is itself the command (05_ddp --nproc-per-node):
// each worker, its variables set, runs `rank` in the forked child instead of starting the
// program again (Note [The worker in place], exec_worker.cpp).
void run_workers_in_place(std::function<int()> rank);

}  // namespace spawn
