// defines: the trainer's state on disk across ranks: checkpoint(), resume() (refusing another
// run's checkpoint), --reset, and what a resumed run that had already finished says.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "05_ddp/ddp.h"
#include "05_ddp/trainer/options.h"
#include "common/group/process_group.h"

namespace ddp {

// What a run is and where it stands in its data: what a checkpoint records so that a resumed run
// is the same run and meets the same samples at the same step. With the step, seed and steps per
// epoch fix the epoch and the position in it; see Note [Resuming at another world size].
struct SamplerState {
  uint64_t seed = 0;
  int64_t steps_per_epoch = 0;
  int64_t global_batch = 0;  // world x per-rank batch x accumulation; 0: a checkpoint older than it
  int64_t world = 0;
  std::string data;           // data_name(): "fashion-mnist" or "synthetic"; "": a checkpoint older than it
  int64_t train_samples = 0;  // the training set's size; 0: a checkpoint older than it
};

// What a checkpoint says about the run that wrote it (Note [Never lose a run]): "sgd", "adamw".
std::string optimizer_kind(const torch::optim::Optimizer& opt);
// Throws UsageError when `saved` (read from `path`) puts its step at other samples than `now`
// would; logs a resume at another world size. See Note [Resuming at another world size] (elastic.h).
void check_same_data_position(const std::string& path, const SamplerState& saved, const SamplerState& now);

// Every rank must continue from the same step, or their collectives no longer pair up: throws,
// naming `dir` and the steps found, unless every rank's `step` is the same.
void check_same_step(Group& group, int64_t step, const std::string& dir, const torch::Device& device);

// Rank 0 writes model, optimizer, step, epoch, sampler state, RNG state and the rebuilt buckets
// to `dir` (atomically, keeping `keep`); then a barrier, so that no rank runs ahead of a
// checkpoint that may still fail.
void checkpoint(const std::string& dir, int64_t step, const SamplerState& sampler, int keep, torch::nn::Module& model,
                torch::optim::Optimizer& opt, const DistributedDataParallel& ddp, Group& group);

// Every rank loads the newest readable checkpoint of `dir` onto its own device; the ranks then
// check that they all resumed at the same step. A checkpoint of another run (another model
// class, optimizer or data source: Note [Never lose a run]) is refused with UsageError. To
// continue training (not `eval_only`), so is one whose data position differs (another seed,
// global batch, steps per epoch or training set), as its step would point to other samples;
// another world size with the same global batch continues (Note [Resuming at another world
// size]). Returns the step the checkpoint was written at (0: none).
int64_t resume(const std::string& dir, const torch::Device& device, const SamplerState& sampler, bool eval_only,
               torch::nn::Module& model, torch::optim::Optimizer& opt, DistributedDataParallel& ddp, Group& group);

// Whether to start over: --reset, in a run's first attempt only. A restarted attempt (02_spawn's
// or torchrun's --max-restarts) gets the same flags, and its --reset would throw away the
// progress it restarts to keep: it resumes, and says so.
bool start_over(const TrainerOptions& o);

// --reset: rank 0 deletes the checkpoints an earlier run left in `dir` (saying how many), then a
// barrier. Starting over must not leave them to be resumed from later, newer-looking than ours.
void remove_checkpoints(const std::string& dir, Group& group);

// The run's checkpoints as main.cpp uses them: where they go, what each records besides the
// step, and which step was written last, so that a step asked for twice (an epoch's end, then a
// preemption after it) is written once.
class Checkpoints {
 public:
  Checkpoints(std::string dir, SamplerState sampler, int keep, torch::nn::Module& model, torch::optim::Optimizer& opt,
              DistributedDataParallel& ddp, Group& group);
  // The step to start from: 0 after removing the folder's checkpoints when start_over(o), else
  // resume()'s (0 without a checkpoint).
  int64_t resume_or_reset(const TrainerOptions& o, const torch::Device& device);
  void save(int64_t step);  // checkpoint() after step `step`, unless this process wrote it already

 private:
  std::string dir_;
  SamplerState sampler_;
  int keep_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& opt_;
  DistributedDataParallel& ddp_;
  Group& group_;
  int64_t saved_ = -1;
};

// A run resumed at or past its last step trains nothing: rank 0 says so, plainly, with the way
// to train again and the flags (drills, faults) that had no step left to act on.
void say_already_finished(const TrainerOptions& o, const std::string& folder, int64_t step, int64_t total_steps);

}  // namespace ddp
