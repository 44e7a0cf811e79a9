// provides: 02_spawn's --max-restarts: the loop of attempts, as torchrun's agent runs it.
#include "02_spawn/restarts.h"

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace spawn {

// Note [Restarts]
// ~~~~~~~~~~~~~~~
// torchrun's --max-restarts: when an attempt fails, all its workers have been stopped (step 5
// of main.cpp); start them all again, with a fresh store, up to N times. There is no partial
// restart: the survivors' group lost a member and cannot go on (Gloo and NCCL groups have a
// fixed membership). The workers learn the attempt from TORCHELASTIC_RESTART_COUNT; a trainer
// resumes from its last checkpoint (chapter 05), losing the steps since. Each attempt's report
// stays in the log. A restart cannot help a preempted run (exit 75: the scheduler requeues it,
// chapter 06) or a run stopped by SIGINT/SIGTERM: Outcome::final, and no restart.

void add_restart_flag(CLI::App& app, int& max_restarts) {
  app.add_option("--max-restarts", max_restarts, "When a worker fails, stop all and start all again, up to N times (torchrun's)")
      ->check(CLI::NonNegativeNumber);
}

void check_restarts(int max_restarts, const ddp::RankInfo& base) {
  if (max_restarts > 0 && base.file_init()) {
    throw ddp::UsageError("--max-restarts starts each attempt with a fresh store; a --init file:// would keep the failed attempt's keys");
  }
}

std::string attempt_label(int attempt, int max_restarts) {
  if (max_restarts <= 0) return "";
  return ", attempt " + std::to_string(attempt + 1) + " of at most " + std::to_string(max_restarts + 1);
}

int run_with_restarts(int max_restarts, int world, const std::function<Outcome(int attempt)>& run_attempt) {
  for (int attempt = 0;; ++attempt) {
    const Outcome o = run_attempt(attempt);
    if (o.code == ddp::kExitOk || o.final || attempt == max_restarts) {
      if (attempt > 0 && o.code != ddp::kExitOk && !o.final) ddp::log_error("no restarts left (--max-restarts " + std::to_string(max_restarts) + ")");
      return o.code;
    }
    ddp::log("attempt " + std::to_string(attempt + 1) + " failed (exit " + std::to_string(o.code) + "): restarting all " +
             std::to_string(world) + " workers (restart " + std::to_string(attempt + 1) + " of " + std::to_string(max_restarts) + ")");
  }
}

}  // namespace spawn
