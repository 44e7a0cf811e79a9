// provides: chapter 06's lesson, second half: steps 2, 4 and 5 of Note [Preemption and requeue]
// (preemption.cpp): StopVote, by which the ranks of a warned job stop after the same step, and
// stop_for_requeue(), by which they leave.
#include "common/slurm/stop_vote.h"

#include <signal.h>

#include <cstdlib>
#include <optional>
#include <thread>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/observe/flight_recorder.h"
#include "common/slurm/preemption.h"

namespace ddp {

// Note [Stopping together without a sync per step]
// A preemption signal reaches the ranks at different moments, yet all must stop after the same
// step, or their collectives no longer pair up. A blocking vote each step (all-reduce MAX of a
// flag, then read it) does that, but on a GPU reading the result waits for the whole step to
// finish: one host sync per step, for a signal that comes once a job. So each step posts its
// flag in an all-reduce that runs in the background, and reads the vote posted one step
// earlier, which has finished by then (on a GPU its result is copied to pinned host memory
// behind it, and only that copy is waited for, not the step in flight). Every rank reads the
// same vote at the same step: all stop together, one step later than a blocking vote would,
// well inside the scheduler's warning time (90 s with --signal=USR2@90; Slurm may send it up to
// 60 s earlier than asked).
struct StopVote::State {
  Group& group;
  torch::Device device;
  std::vector<torch::Tensor> flag;  // on the device, all-reduced in place
  torch::Tensor host;               // a GPU's result, copied here (pinned) behind the all-reduce
  std::optional<Pending> pending;
  std::optional<c10::Event> copied;  // a GPU's: recorded after that copy
};

StopVote::StopVote(Group& group) : s_(std::make_unique<State>(State{group, device_for(group.info), {}, {}, {}, {}})) {
  if (s_->device.is_cuda()) s_->host = torch::zeros({1}, torch::TensorOptions(torch::kInt32).pinned_memory(true));
}

StopVote::~StopVote() {
  if (!s_->pending || std::uncaught_exceptions() > 0) return;  // on a failure the group aborts
  try {
    wait(s_->group, *s_->pending);
  } catch (const std::exception& e) {
    log("the last stop vote failed: " + short_what(e));
  }
}

// Reads the vote posted one step earlier; unless it says stop, posts this step's (`post`: not
// after the last step, which must leave no vote in flight).
bool StopVote::next(bool mine, bool post) {
  State& s = *s_;
  bool stop = false;
  if (s.pending) {
    if (s.device.is_cuda()) {
      while (!s.copied->query()) std::this_thread::yield();  // the previous step's vote: done long ago
      stop = s.host.item<int>() != 0;
    } else {
      wait(s.group, *s.pending);
      stop = s.flag[0].item<int>() != 0;
    }
    s.pending.reset();
  }
  if (stop || !post) return stop;
  // Filled where it lives: a CPU value copied to a GPU from pageable memory would make the host
  // wait for everything queued before it, a sync per step (measured: 2.5 ms a step on an H100).
  if (s.flag.empty()) s.flag = {torch::zeros({1}, torch::TensorOptions(torch::kInt32).device(s.device))};
  s.flag[0].fill_(mine ? 1 : 0);
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  s.pending = issue(s.group, "all-reduce", "stop-flag", 4, [&] { return s.group.pg->allreduce(s.flag, max_op); });
  if (s.device.is_cuda()) {
    wait(s.group, *s.pending);  // NCCL: the current stream waits for the all-reduce; the host does not
    s.host.copy_(s.flag[0], /*non_blocking=*/true);
    c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    s.copied.emplace(c10::DeviceType::CUDA);
    s.copied->record(cuda.getStream(s.device));
  }
  return false;
}

// Steps 4 and 5, once the step's checkpoint is written.
int stop_for_requeue(Group& group, int64_t step, int sig) {
  // We are stopping anyway: the SIGTERM that follows a requeue must not cut this short.
  ::signal(SIGTERM, SIG_IGN);
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string restart = std::getenv("SLURM_RESTART_COUNT") ? std::getenv("SLURM_RESTART_COUNT") : "0";
  log0("preempted: " + signal_name(sig) + " received; stopped after step " + std::to_string(step) +
       " with its checkpoint written" +
       (job ? "; requeueing Slurm job " + std::string(job) + " (restart " + restart + ")"
            : "; not under Slurm, nothing to requeue: run the same command again to resume"));
  if (group.rank() == 0 && job) {
    requeue_slurm_job(job, group.info.timeout_s.value);
    log("Slurm job " + std::string(job) + " requeued: it resumes from step " + std::to_string(step) + " when it runs again");
  }
  return kExitPreempted;
}

}  // namespace ddp
