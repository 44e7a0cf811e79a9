// defines: the preemption signal caught as a flag, rehearsed with a drill, and the Slurm job requeued.
// Chapter 06's lesson is in preemption.cpp: Note [Preemption and requeue], then steps 1 and 4.
#pragma once
#include <string>

#include "common/slurm/signals.h"  // parse_signal(), signal_name()

namespace ddp {

// Parses the trainer's --requeue-signal (a UsageError if it is not a scheduler's signal) and
// watches for it. Call it before joining: a signal that comes then is not fatal. Returns it.
int listen_for_preemption(const std::string& signal);
void watch_for_preemption(int sig);  // the handler alone, for a signal already parsed
int preemption_signal();             // the signal received since then, or 0

// The laptop drill: this process sends itself `sig` after `after_s` seconds, as Slurm would.
void drill_preemption(int sig, double after_s);

// Rank 0's step 4: `scontrol requeue <job_id>`, at most `timeout_s`. Throws std::runtime_error
// with scontrol's own words when it fails (no scontrol, job not requeueable, ...).
void requeue_slurm_job(const std::string& job_id, double timeout_s);

}  // namespace ddp
