// defines: the expected share of a job's time lost to faults, checkpoint-and-restart (at Young's
// and Daly's intervals) against a quorum per step (chapter 08), and a simulation of both.
#pragma once
#include <cstdint>
#include <string>

namespace ddp::sim {

// Note [What faults cost at scale]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// N nodes, each failing on its own with mean time between failures m: the job fails every
// M = m / N on average (failures as a Poisson process: exponential gaps).
// Checkpoint and restart (chapters 05, 06): a checkpoint every tau seconds of work costs C; a
// failure loses the work since the last checkpoint (tau/2 on average, plus the checkpoint's C
// when it struck during one) and a restart R (every process again, the checkpoint loaded). To
// first order in tau/M the share of time lost is
//   W(tau) = C / tau + (tau / 2 + C / 2 + R) / M,
// least at Young's tau = sqrt(2 C M) (Young 1974); Daly's tau = sqrt(2 C M) - C (Daly 2006, his
// first-order estimate; for C < 2M) accounts for the checkpoint's own time at risk.
// A quorum per step (chapter 08): a failure is seen at the step's all-reduce, so it costs the
// survivors the whole step that failed (t + q), the recovery r (a new quorum and a new group:
// measured by bench/recovery.sh), and, until a replacement has started and healed (J), one
// replica group's share of the work (1/G of it, G replica groups: the dynamic global batch);
// every step also pays the quorum's question q:
//   W_q = q / t + (t + q + r + J / G) / M.
// Both formulas hold while failures are rare against the work between them (tau, J << M); the
// simulation below makes no such assumption and the tests hold the formulas to it.
struct FaultInputs {
  int nodes = 1;
  double node_mtbf_s = 0;      // m
  double checkpoint_s = 0;     // C
  double restart_s = 0;        // R
  double step_s = 0;           // t
  double recovery_s = 0;       // r
  double quorum_s = 0;         // q, per step
  double replacement_s = 0;    // J
  int replica_groups = 1;      // G
};

struct FaultCost {
  double job_mtbf_s = 0;       // M
  double young_interval_s = 0, daly_interval_s = 0;
  double restart_loss = 0;     // W at Young's interval
  double restart_loss_daly = 0;
  double quorum_loss = 0;      // W_q
};

// The formulas above. Throws UsageError on inputs they cannot take (non-positive MTBF, ...).
FaultCost fault_cost(const FaultInputs& in);

// Simulates `work_s` of work under random failures (seeded), with checkpoints every `interval_s`
// or (interval_s = 0) a quorum per step; returns the share of the wall-clock time lost.
double simulate_restart_loss(const FaultInputs& in, double interval_s, double work_s, uint64_t seed);
double simulate_quorum_loss(const FaultInputs& in, double work_s, uint64_t seed);

// The report ddp_sim --faults prints.
std::string describe_fault_cost(const FaultInputs& in, const FaultCost& c);

}  // namespace ddp::sim
