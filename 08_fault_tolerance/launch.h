// defines: the roles of 08_fault_tolerance besides a replica: the lighthouse, the launcher, the replay.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "08_fault_tolerance/options.h"
#include "08_fault_tolerance/step_log.h"

namespace ch08 {

// --lighthouse-only: hosts the lighthouse's store and ticks until SIGINT/SIGTERM or --serve-for.
int serve_lighthouse(const Options& o);

// --replicas N: a lighthouse and N replicas of this program, the faults of --inject, the
// replacements of --replace-after; then the run's checks (Note [The step log is the schedule]).
// --check: those checks only, on the run in --out.
int launch(const Options& o);

// One process replays the schedule: each step's contributors' gradients summed in their order,
// divided by their number, the optimizer stepped. Returns the final parameters.
std::vector<torch::Tensor> replay(const std::vector<StepRecord>& schedule, const ddp::toy::TrainConfig& cfg);

// Local SGD and DiLoCo (Note [Local SGD], Note [DiLoCo]): every replica of the schedule replayed
// on its own, each contributor stepping on its slice, the parameters averaged (or DiLoCo's outer
// step taken, or the local steps discarded) at the steps that did so; `heals` says who healed
// from whom before which step. Returns each replica's final parameters.
struct HealRecord {
  std::string replica, donor;
  int64_t step = 0;
};
std::map<std::string, std::vector<torch::Tensor>> replay_local(const std::vector<StepRecord>& schedule,
                                                               const std::vector<HealRecord>& heals,
                                                               const ddp::toy::TrainConfig& cfg, const Outer& outer);

}  // namespace ch08
