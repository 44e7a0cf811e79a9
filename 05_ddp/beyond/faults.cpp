// provides: Faults. See Note [Faults injected into the trainer].
#include "05_ddp/beyond/faults.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/rank_env.h"
#include "common/observe/trace.h"

namespace ddp {

Faults::Faults(const TrainerOptions& o, int rank, int world) : o_(o), rank_(rank), first_attempt_(restart_count() == 0) {
  if (o.kill_rank.has_value() != o.kill_at_step.has_value()) throw UsageError("--kill-rank and --kill-at-step go together");
  if (o.kill_node && !o.kill_rank) throw UsageError("--kill-node goes with --kill-rank and --kill-at-step");
  if (o.skip_rank.has_value() != o.skip_at_step.has_value()) throw UsageError("--skip-rank and --skip-at-step go together");
  if (o.straggle_rank.has_value() != (o.straggle_ms > 0)) throw UsageError("--straggle-rank and --straggle-ms go together");
  // The ranks are checked in the first attempt only: a restart may have a smaller world (a node left).
  for (const auto& [flag, r] : {std::pair{"--kill-rank", o.kill_rank}, {"--skip-rank", o.skip_rank}, {"--straggle-rank", o.straggle_rank}}) {
    if (!first_attempt_) break;
    if (r && *r >= world) throw UsageError(std::string(flag) + " " + std::to_string(*r) + ": no such rank in a world of " + std::to_string(world));
  }
  if (!first_attempt_ && (o.kill_rank || o.skip_rank || o.straggle_rank)) {
    log0("fault injection off: this is restart " + std::to_string(restart_count()) + " (TORCHELASTIC_RESTART_COUNT)");
  }
}

void Faults::attach(DistributedDataParallel& ddp, Group& group) {
  if (!first_attempt_ || o_.skip_rank != rank_) return;
  ddp.register_comm_hook([inner = ddp.comm_hook(), skip = skip_next_, &group](GradBucket& b) {
    if (*skip && b.index == 0) {
      *skip = false;
      log("fault injection (--skip-rank): not starting the all-reduce of " + b.tag);
      return Reduction{};
    }
    if (inner) return inner(b);
    b.buffer.mul_(1.0 / group.size());  // what the class does while copying when no hook is registered
    return allreduce_sum(group, b);
  });
}

void Faults::before_step(int64_t step) {
  if (!first_attempt_) return;
  if (o_.straggle_rank == rank_) {
    Span s("straggling (--straggle-ms)", "fault");
    std::this_thread::sleep_for(std::chrono::milliseconds(o_.straggle_ms));
  }
  if (o_.skip_rank == rank_ && o_.skip_at_step == step + 1) *skip_next_ = true;  // steps count from 1
}

void Faults::after_step(int64_t step) const {
  if (first_attempt_ && o_.kill_rank == rank_ && o_.kill_at_step == step + 1) {
    log("fault injection: SIGKILL after step " + std::to_string(step + 1) + (o_.kill_node ? ", to this rank and its launcher (pid " +
                                                                                            std::to_string(::getppid()) + "): a node dies" : ""));
    trace().flush();
    if (o_.kill_node) ::kill(::getppid(), SIGKILL);
    ::raise(SIGKILL);
  }
}

}  // namespace ddp
