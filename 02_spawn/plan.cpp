// provides: 02_spawn's plan: its flags checked and resolved into what every worker starts from.
#include "02_spawn/plan.h"

#include <cstdio>

#include "02_spawn/restarts.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace spawn {

void add_plan_flags(CLI::App& app, Plan& plan) {
  app.add_option("--nnodes", plan.nnodes, "Simulated nodes [default: 1]");
  app.add_option("--nproc-per-node", plan.nproc, "Workers per simulated node [default: world-size / nnodes, else 2]");
  add_fault_flags(app, plan.fault);          // Note [Faults on purpose]
  add_restart_flag(app, plan.max_restarts);  // Note [Restarts]
  plan.links.add_flag(app);                  // Note [Nodes on links]
  app.add_option("--grace", plan.grace_s, "Seconds the others get after SIGTERM before SIGKILL");
  app.add_option("--on-failure", plan.on_failure, "When a worker fails: stop the others (torchrun's way), or wait and watch them fail by themselves")
      ->check(CLI::IsMember({"stop", "wait"}));
}

std::vector<std::string> program_after_dashes(int& argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    std::vector<std::string> command(argv + i + 1, argv + argc);
    argc = i;
    return command;
  }
  return {};
}

void make_plan(const ddp::CommonFlags& flags, Plan& plan) {
  if (flags.rank) throw ddp::UsageError("--rank: 02_spawn gives its workers their ranks; --rank is for programs started once per rank");
  const int n_nodes = plan.n_nodes = plan.nnodes.value_or(1);
  if (n_nodes < 1) throw ddp::UsageError("--nnodes must be at least 1");
  const int per_node = plan.per_node = plan.nproc.value_or(flags.world_size ? *flags.world_size / n_nodes : 2);
  const int world = plan.world = flags.world_size.value_or(n_nodes * per_node);
  if (per_node < 1 || world != n_nodes * per_node) {
    throw ddp::UsageError("--world-size " + std::to_string(world) + " is not --nnodes " + std::to_string(n_nodes) +
                          " x --nproc-per-node " + std::to_string(per_node));
  }
  if (plan.fault.rank && (*plan.fault.rank < 0 || *plan.fault.rank >= world)) {
    throw ddp::UsageError("--fail-rank must be in 0.." + std::to_string(world - 1));
  }
  if (!(plan.grace_s >= 0)) throw ddp::UsageError("--grace must be >= 0");
  if (!plan.command.empty() && plan.fault.rank) throw ddp::UsageError("--fail-rank works with the built-in worker, not with a program after --");
  ddp::CommonFlags base_flags = flags;
  base_flags.rank = 0;
  base_flags.world_size = world;
  // No GPU count here: CUDA started before fork() is unusable in the children. Without
  // --backend each worker chooses from its own GPUs (Note [Choosing the backend]).
  ddp::RankInfo& base = plan.base =
      ddp::resolve_rank_info(base_flags, ddp::process_env(), [] { return ddp::GpuCount{0, "(not counted by the launcher)"}; });
  if (!flags.backend) base.backend = {"gloo", "default: each worker chooses, from the GPUs it sees"};
  const std::string plan_src = flags.world_size ? "--world-size" : "--nnodes x --nproc-per-node";
  base.world_size.source = plan_src;
  base.rank.source = base.local_rank.source = base.node_rank.source = "assigned to each worker by 02_spawn";
  base.local_world_size = {per_node, plan_src};
  base.external_store = {true, "02_spawn hosts the store"};
  base.simulated_nodes = n_nodes;  // they all share this host's GPUs
  plan.links.plan(base, flags.master_addr.has_value());  // --link: the store on node 0's address
  ddp::validate(base);
  if (!plan.command.empty() && base.file_init()) throw ddp::UsageError("--init file:// is for the built-in worker; give it to the program after -- instead");
  check_restarts(plan.max_restarts, base);
  // An explicit --master-port or MASTER_PORT is honoured; otherwise the OS picks one.
  plan.os_port = base.master_port.source == "default";
}

void explain_plan(const Plan& plan) {
  const ddp::RankInfo& base = plan.base;
  std::printf("%s  launch plan: %d node(s) x %d per node = world size %d, store on %s:%s\n", ddp::explain(base).c_str(), plan.n_nodes,
              plan.per_node, plan.world, base.master_addr.value.c_str(),
              plan.os_port ? "<port chosen by the OS>" : std::to_string(base.master_port.value).c_str());
  for (int r = 0; r < plan.world; ++r) std::printf("    rank %d: node %d, local rank %d\n", r, r / plan.per_node, r % plan.per_node);
}

void log_start(const Plan& plan, int attempt, int port) {
  const ddp::RankInfo& base = plan.base;
  ddp::log("starting " + std::to_string(plan.world) + " workers (" + std::to_string(plan.n_nodes) + " node(s) x " +
           std::to_string(plan.per_node) + " per node" + attempt_label(attempt, plan.max_restarts) + "), " +
           (base.file_init() ? "store " + base.init.value
                             : "store on " + base.master_addr.value + ":" + std::to_string(port) + (plan.os_port ? " (port chosen by the OS)" : "")));
}

}  // namespace spawn
