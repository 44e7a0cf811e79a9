// defines: run_with_restarts() and --max-restarts: torchrun's restarts for 02_spawn, where a
// failed attempt starts every worker again. See Note [Restarts].
#pragma once
#include <functional>
#include <string>

#include "common/basics/cli.h"
#include "common/launch/rank_env.h"

namespace spawn {

// What an attempt ended with: its exit code, and whether a restart could help (not after a
// preemption, a stop signal, or a store that could not start).
struct Outcome {
  int code = 0;
  bool final = false;
};

// Adds --max-restarts to `app`.
void add_restart_flag(CLI::App& app, int& max_restarts);
// Refuses (UsageError) restarts with a --init file://, whose keys would outlive an attempt.
void check_restarts(int max_restarts, const ddp::RankInfo& base);
// ", attempt 2 of at most 3" for the launcher's "starting ..." line; "" without --max-restarts.
std::string attempt_label(int attempt, int max_restarts);
// Runs attempt(0), then attempt(1), ... while an attempt fails and restarts are left; returns
// the exit code of the last one.
int run_with_restarts(int max_restarts, int world, const std::function<Outcome(int attempt)>& attempt);

}  // namespace spawn
