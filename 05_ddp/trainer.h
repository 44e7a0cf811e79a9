// defines: the trainer's plumbing: optimizer by flag, checkpoint save/resume across ranks, and
// --nproc-per-node (re-running this program under chapter 02's launcher).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "05_ddp/ddp.h"
#include "05_ddp/options.h"
#include "common/basics/cli.h"
#include "common/group/process_group.h"
#include "common/slurm/preemption.h"

namespace ddp {

// SGD with momentum, or AdamW, as --optimizer says.
std::unique_ptr<torch::optim::Optimizer> make_trainer_optimizer(const std::vector<torch::Tensor>& params,
                                                                const TrainerOptions& o);

int64_t count_parameters(const std::vector<torch::Tensor>& params);

// Where the data order stands: the sampler's seed and how many steps make an epoch (which
// follows from world size, batch size and --grad-accum). With the step they fix the epoch and
// the position in it, so a resumed run sees exactly the batches an uninterrupted one would.
// Where a run is in its data: what a checkpoint needs so that a resumed run meets the same
// samples at the same step. See Note [Resuming at another world size].
struct SamplerState {
  uint64_t seed = 0;
  int64_t steps_per_epoch = 0;
  int64_t global_batch = 0;  // world x per-rank batch x accumulation; 0: a checkpoint older than it
  int64_t world = 0;
};

// Rank 0 writes model, optimizer, step, epoch, sampler state and RNG state to `dir`
// (atomically, keeping `keep`); then a barrier, so that no rank runs ahead of a checkpoint
// that may still fail.
void checkpoint(const std::string& dir, int64_t step, const SamplerState& sampler, int keep, torch::nn::Module& model,
                torch::optim::Optimizer& opt, const DistributedDataParallel& ddp, Group& group);

// Every rank loads the newest readable checkpoint of `dir` onto its own device; the ranks then
// check that they all resumed at the same step. To continue training, `sampler` is given: a
// checkpoint whose sampler state differs (another seed, global batch or steps per epoch) is
// refused with UsageError, as its step would point to other samples; another world size with
// the same global batch continues (Note [Resuming at another world size]). To evaluate only, any will do
// (std::nullopt). Returns the step the checkpoint was written at (0: none).
int64_t resume(const std::string& dir, const torch::Device& device, const std::optional<SamplerState>& sampler,
               torch::nn::Module& model, torch::optim::Optimizer& opt, DistributedDataParallel& ddp, Group& group);

// --reset: rank 0 deletes the checkpoints an earlier run left in `dir` (saying how many), then a
// barrier. Starting over must not leave them to be resumed from later, newer-looking than ours.
void remove_checkpoints(const std::string& dir, Group& group);

// Note [Stopping together without a sync per step]
// A preemption signal reaches the ranks at different moments, yet all must stop after the same
// step, or their collectives no longer pair up. A blocking vote each step (all-reduce MAX of a
// flag, then read it) does that, but on a GPU reading the result waits for the whole step to
// finish: one host sync per step, for a signal that comes once a job. So each step posts its
// flag in an all-reduce that runs in the background, and reads the vote posted one step
// earlier, which has finished by then (on a GPU its result is copied to pinned host memory
// behind it, and only that copy is waited for, not the step in flight). Every rank reads the
// same vote at the same step: all stop together, one step later than a blocking vote would,
// well inside the scheduler's warning time (90-120 s).
class StopVote {
 public:
  explicit StopVote(Group& group);
  ~StopVote();  // waits for a vote still in flight: the group must not be left with it
  // Reads the vote posted by the previous call (false if none); unless it says stop, posts
  // `mine` when `post` is true. Returns true when some rank had raised its flag.
  bool next(bool mine, bool post);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// After a preemption signal and its checkpoint at `step`: rank 0 requeues the Slurm job (when
// there is one), and every rank returns kExitPreempted. See Note [Preemption and requeue].
int stop_for_requeue(Group& group, int64_t step, int sig);

// --nproc-per-node N: replaces this process with `02_spawn --nproc-per-node N -- <this program>
// <the same flags>`; chapter 02's launcher forks the ranks, watches them and reports failures.
int relaunch_with_02_spawn(int argc, char** argv, int nproc, const CommonFlags& flags, const TrainerOptions& o);

// The faults --kill-rank, --straggle-rank and --skip-rank inject, each in one rank, for real:
// see Note [Flight recorder] for what the other ranks then say. The constructor checks the
// flags (UsageError). They fire in a run's first attempt only: after a restart
// (TORCHELASTIC_RESTART_COUNT > 0, set by 02_spawn and torchrun) the run is meant to finish.
class Faults {
 public:
  Faults(const TrainerOptions& o, int rank, int world);
  void before_step(int64_t step, DistributedDataParallel& ddp) const;  // straggle; skip an all-reduce
  void after_step(int64_t step) const;                                 // kill

 private:
  const TrainerOptions& o_;
  int rank_;
  bool first_attempt_;
};

}  // namespace ddp
