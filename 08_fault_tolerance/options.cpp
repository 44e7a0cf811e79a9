// provides: chapter 08's flags and the faults a replica can be told to suffer.
#include "08_fault_tolerance/options.h"

#include <signal.h>
#include <unistd.h>

#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/error_file.h"
#include "08_fault_tolerance/step_log.h"

namespace ch08 {

void parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"08_fault_tolerance: train through a lost replica without a restart (a quorum per step, healing from a peer)"};
  ddp::show_true_defaults(app);
  // A flag given twice: the last one wins, as in every chapter (a batch script appends overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ddp::toy::add_train_flags(app, o.train);
  ddp::toy::TrainConfig& cfg = o.train.cfg;
  app.add_option("--optimizer", cfg.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->check(ddp::finite_number())->check(CLI::Range(0.0, 1.0));
  // a replica
  app.add_option("--replica-id", o.replica_id, "This replica's id, unique in the run (a replacement takes a new one)");
  app.add_option("--lighthouse", o.lighthouse, "host:port of the lighthouse");
  app.add_option("--run", o.run, "The run's name: the lighthouse refuses replicas of another run");
  app.add_option("--out", o.out, "The run's folder: each replica's step log (default runs/08_fault_tolerance/<run>)");
  app.add_option("--contributors", o.contributors, "At most K members contribute to a step, the rest are spares "
                                                   "(the global batch stays K x --batch x --ranks-per-replica); 0: all (it changes with the quorum)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ranks-per-replica", o.ranks_per_replica, "Ranks in each replica group, on one host: chapter 05's DDP among "
                                                           "them, the quorum across groups (Note [A replica group of several ranks])")
      ->check(CLI::Range(1, 8));
  app.add_option("--timeout", o.timeout_s, "Seconds a collective waits for a silent peer (Gloo cannot abort one)")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--quorum-deadline", o.quorum_deadline_s, "Seconds a replica waits for a quorum (or for a lost lighthouse) before it exits 1")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--sync-every", o.sync_every, "Local SGD: no gradient all-reduce; the parameters averaged every H steps, "
                                               "as PyTorch's PostLocalSGDOptimizer (with --outer-lr: DiLoCo; 0: the gradients every step)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--outer-lr", o.outer.lr, "DiLoCo (with --sync-every): the pseudo-gradients averaged, and an outer SGD "
                                          "with Nesterov momentum stepped on them at this learning rate (0: local SGD)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--outer-momentum", o.outer.momentum, "DiLoCo's outer Nesterov momentum")
      ->check(ddp::finite_number())->check(CLI::Range(0.0, 1.0));
  app.add_option("--step-ms", o.step_ms, "Milliseconds of compute added to each step, as a bigger model would take "
                                         "(so that a replacement started late still finds the run going)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--fault", o.fault, "WHERE@STEP: SIGKILL this replica before it asks for that step's quorum (quorum), in its forward, inside its "
                                 "all-reduce (allreduce) or after its vote (vote), or SIGSTOP it (stop); in a replica group of several ranks, its last rank");
  // the lighthouse
  app.add_flag("--lighthouse-only", o.serve, "Be the lighthouse, on --port, until a signal (or --serve-for)");
  app.add_option("--port", o.port, "The lighthouse's port")->check(CLI::Range(1, 65535));
  app.add_option("--min-replicas", o.quorum.min_replicas, "The smallest quorum")->check(CLI::PositiveNumber);
  app.add_option("--expect", o.quorum.first, "The first quorum waits for this many replicas; --replicas sets it")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--join-timeout", o.quorum.join_timeout_s, "Seconds a quorum waits for alive replicas that have not asked")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--heartbeat-timeout", o.quorum.heartbeat_timeout_s, "Seconds without a heartbeat before a replica counts as lost")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--serve-for", o.serve_for_s, "The lighthouse stops after this many seconds (0: until a signal)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_flag("--until-done", o.until_done, "The lighthouse stops once the run has ended and every replica has gone (exit 0), "
                                           "or when none has been connected for --quorum-deadline before the end (exit 1)");
  app.add_flag("--check", o.check_only, "Check the finished run in --out, as the launcher does after its run (the same training flags)");
  // the launcher
  app.add_option("--replicas", o.replicas, "Start a lighthouse and N replicas on this machine, watch them, check the run")
      ->check(CLI::Range(1, 16));
  app.add_flag("--reset", o.reset, "Remove an earlier run's step logs and parameters from --out first");
  app.add_option("--inject", o.faults, "ID:WHERE@STEP, e.g. r1:allreduce@8: that replica's --fault (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--replace-after", o.replace_after_s, "Start a new replica this many seconds after one is lost (-1: never)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--link", o.link, "Each replica a host with its own address, on a link of this bandwidth (e.g. 10mbit), "
                                  "the lighthouse on the first (02_spawn's --link; needs root)");
  std::string down;
  app.add_option("--lighthouse-down", down, "K:S: kill the lighthouse once a replica has committed step K, start it again S seconds later");
  ddp::parse_flags(app, argc, argv);
  if (!down.empty()) {
    const size_t colon = down.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      o.lighthouse_down_step = std::stoll(down.substr(0, colon)), o.lighthouse_down_s = std::stod(down.substr(colon + 1));
    } catch (const std::exception&) {
      std::fprintf(stderr, "--lighthouse-down: '%s' is not K:S (a step, then seconds)\n", down.c_str());
      ddp::leave_now(ddp::kExitUsage);
    }
  }
  if (o.sync_every > 0 && o.contributors > 0) {
    std::fprintf(stderr, "--sync-every with --contributors: spares are not part of local SGD here (Note [Local SGD])\n");
    ddp::leave_now(ddp::kExitUsage);
  }
  if (o.outer.lr > 0 && o.sync_every == 0) {
    std::fprintf(stderr, "--outer-lr is DiLoCo's outer learning rate: it needs --sync-every H (Note [DiLoCo])\n");
    ddp::leave_now(ddp::kExitUsage);
  }
  if (o.check_only && o.out.empty()) {
    std::fprintf(stderr, "--check: say which run's folder to check (--out)\n");
    ddp::leave_now(ddp::kExitUsage);
  }
  o.out_given = !o.out.empty();
  if (o.out.empty()) o.out = "runs/08_fault_tolerance/" + o.run;
}

std::pair<std::string, int> split_address(const std::string& address, const std::string& flag) {
  const size_t colon = address.rfind(':');
  int port = 0;
  try {
    if (colon == std::string::npos || colon == 0) throw std::invalid_argument("no host");
    size_t used = 0;
    port = std::stoi(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1 || port < 1 || port > 65535) throw std::invalid_argument("port");
  } catch (const std::exception&) {
    throw ddp::UsageError(flag + " '" + address + "' is not host:port (a port from 1 to 65535)");
  }
  return {address.substr(0, colon), port};
}

Fault parse_fault(const std::string& text, const std::string& flag) {
  Fault f;
  if (text.empty()) return f;
  const size_t at = text.find('@');
  try {
    if (at == std::string::npos) throw std::invalid_argument("no @");
    f.where = text.substr(0, at);
    size_t used = 0;
    f.step = std::stoll(text.substr(at + 1), &used);
    if (used != text.size() - at - 1 || f.step < 0) throw std::invalid_argument("step");
  } catch (const std::exception&) {
    throw ddp::UsageError(flag + " '" + text + "' is not WHERE@STEP (a step from 0)");
  }
  if (f.where != "quorum" && f.where != "forward" && f.where != "allreduce" && f.where != "vote" && f.where != "stop")
    throw ddp::UsageError(flag + " '" + text + "': WHERE is quorum, forward, allreduce, vote or stop");
  return f;
}

void Fault::at(const std::string& point, int64_t step_now) const {
  if (step_now != step || (point != where && !(where == "stop" && point == "forward"))) return;
  ddp::log("fault: " + std::string(where == "stop" ? "SIGSTOP" : "SIGKILL") + " to myself in " + point + " of step " +
           std::to_string(step_now) + " (--fault)");
  if (log) log->line("fault " + where + " step " + std::to_string(step_now) + " at " + std::to_string(ddp::monotonic_seconds()));
  raise(where == "stop" ? SIGSTOP : SIGKILL);
}

}  // namespace ch08
