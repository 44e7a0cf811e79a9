// provides: fault_cost(), the simulations that hold it, and the report (Note [What faults cost at scale]).
#include "bench/fault_cost.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <random>

#include "common/basics/errors.h"

namespace ddp::sim {

FaultCost fault_cost(const FaultInputs& in) {
  if (in.nodes < 1) throw UsageError("--nodes must be at least 1");
  if (!(in.node_mtbf_s > 0)) throw UsageError("--node-mtbf-hours must be above 0");
  if (!(in.step_s > 0)) throw UsageError("--step-s must be above 0");
  if (in.replica_groups < 1) throw UsageError("--replica-groups must be at least 1");
  FaultCost c;
  c.job_mtbf_s = in.node_mtbf_s / in.nodes;
  const double M = c.job_mtbf_s, C = in.checkpoint_s;
  auto loss = [&](double tau) { return C / tau + (tau / 2 + C / 2 + in.restart_s) / M; };
  c.young_interval_s = std::sqrt(2 * C * M);
  c.daly_interval_s = C < 2 * M ? c.young_interval_s - C : M;
  c.restart_loss = C > 0 ? loss(c.young_interval_s) : (in.restart_s) / M;
  c.restart_loss_daly = C > 0 ? loss(c.daly_interval_s) : c.restart_loss;
  c.quorum_loss = in.quorum_s / in.step_s + (in.recovery_s + in.step_s + in.quorum_s + in.replacement_s / in.replica_groups) / M;
  return c;
}

double simulate_restart_loss(const FaultInputs& in, double interval_s, double work_s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(in.nodes / in.node_mtbf_s);
  double wall = 0, done = 0, next_failure = gap(rng);
  while (done < work_s) {
    // A segment: up to interval_s of work, then a checkpoint; a failure in it loses the segment.
    const double segment = std::min(interval_s, work_s - done), cost = segment + in.checkpoint_s;
    if (wall + cost <= next_failure) {
      wall += cost, done += segment;
      continue;
    }
    wall = next_failure + in.restart_s;  // a failure during the restart is left out: R << M
    next_failure = wall + gap(rng);
  }
  return (wall - work_s) / wall;
}

double simulate_quorum_loss(const FaultInputs& in, double work_s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(in.nodes / in.node_mtbf_s);
  const double G = in.replica_groups;
  double wall = 0, done = 0, next_failure = gap(rng), short_until = -1;  // short_until: a group missing
  const double rate = 1.0;  // work per second with every group
  while (done < work_s) {
    const double step_wall = in.step_s + in.quorum_s;
    // While a group is missing (until its replacement has healed), a step does (G-1)/G of the work.
    const double work = in.step_s * rate * (wall < short_until ? (G - 1) / G : 1.0);
    if (wall + step_wall <= next_failure) {
      wall += step_wall, done += work;
      continue;
    }
    // A failure during a step is seen at its all-reduce, at the step's end: the whole step is
    // lost, then the recovery; the replacement heals in later, beside the training.
    const double failed_at = next_failure;
    wall += step_wall + in.recovery_s;
    short_until = wall + in.replacement_s;
    next_failure = std::max(failed_at + gap(rng), wall);  // one during the recovery strikes right after it
  }
  return (wall - work_s) / wall;
}

std::string describe_fault_cost(const FaultInputs& in, const FaultCost& c) {
  char out[1200];
  std::snprintf(out, sizeof(out),
                "faults: %d nodes, each failing every %.0f h on average: the job fails every %.2f h (M)\n"
                "checkpoint and restart: checkpoint %.0f s, restart %.0f s: Young's interval %.0f s (Daly's %.0f s); "
                "time lost %.2f%% (%.2f%% at Daly's)\n"
                "a quorum per step: step %.3f s, its question %.3f s, recovery %.3f s, a replacement healed in %.0f s, "
                "%d replica groups: time lost %.2f%%\n",
                in.nodes, in.node_mtbf_s / 3600, c.job_mtbf_s / 3600, in.checkpoint_s, in.restart_s, c.young_interval_s,
                c.daly_interval_s, 100 * c.restart_loss, 100 * c.restart_loss_daly, in.step_s, in.quorum_s, in.recovery_s,
                in.replacement_s, in.replica_groups, 100 * c.quorum_loss);
  return out;
}

}  // namespace ddp::sim
