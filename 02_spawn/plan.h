// defines: Plan, what 02_spawn's flags decide before anything starts (step 1 of main.cpp), and
// make_plan(), which checks them and resolves what every worker starts from.
#pragma once
#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "02_spawn/faults.h"
#include "02_spawn/links.h"
#include "common/basics/cli.h"
#include "common/launch/rank_env.h"

namespace spawn {

struct Plan {
  std::optional<int> nnodes, nproc;          // --nnodes, --nproc-per-node as given
  int world = 0, n_nodes = 0, per_node = 0;  // worker r runs on node r / per_node, as local rank r % per_node
  ddp::RankInfo base;                // what every worker starts from; rank, local and node rank are its own
  bool os_port = true;               // no --master-port: the OS picks the store's port
  std::vector<std::string> command;  // a program to run as each worker (after "--"), or none
  double grace_s = 5;
  std::string on_failure = "stop";
  Fault fault;                       // Note [Faults on purpose]
  int max_restarts = 0;              // Note [Restarts]
  Links links;                       // Note [Nodes on links]
  sigset_t watched, previous;        // the signals step 5 waits for; the mask the workers get back
};

// Adds 02_spawn's own flags to `app`, bound to `plan`: --nnodes, --nproc-per-node, the faults',
// --max-restarts, --link, --grace and --on-failure.
void add_plan_flags(CLI::App& app, Plan& plan);
// The words after "--" (a program to run as each worker, as with torchrun --no-python); argc
// is cut there, so that the flags parser sees only the launcher's own.
std::vector<std::string> program_after_dashes(int& argc, char** argv);
// Checks the flags (UsageError: exit 2) and fills `plan` from them, but for the signal sets.
void make_plan(const ddp::CommonFlags& flags, Plan& plan);
// What --explain-env prints: every value with its source, and each rank's node and local rank.
void explain_plan(const Plan& plan);
// The launcher's first line of an attempt, once its store listens on `port` (step 4 of main.cpp):
// how many workers on how many nodes, which attempt, and where the store is.
void log_start(const Plan& plan, int attempt, int port);

}  // namespace spawn
