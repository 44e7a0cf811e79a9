// defines: RunExtras: everything the trainer does besides its lesson, reached from main.cpp
// through this one object. Skip it on a first reading of the chapter. Each part has a file:
//   faults.h        --kill-rank, --straggle-rank, --skip-rank: faults injected for real
//   common/slurm/stop_vote.h   the warning signal's stop vote and requeue: chapter 06's lesson
//   sample_log.h    --record-samples: which images each rank saw at each step
//   common/observe/flight_recorder.h   every collective recorded, to name a failing rank
//   common/observe/run_trace.h         --trace: a timeline per rank, merged at the end
//   gpu_timeline.h  with --trace on a GPU: the GPU's own kernels, and the overlap they show
//   ddp_flags.h     --comm-hook, --gradient-as-bucket-view, --find-unused-parameters onto the DDP class
//   zero.h          --zero: the optimizer's state sharded over the ranks
//   amp.h           --amp: mixed precision on a GPU, around the loss function and the optimizer
//   join.h          --uneven-shards, --join: PyTorch's Join context for DDP
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "05_ddp/ddp.h"
#include "05_ddp/beyond/amp.h"
#include "05_ddp/beyond/faults.h"
#include "05_ddp/beyond/gpu_timeline.h"
#include "05_ddp/beyond/join.h"
#include "05_ddp/beyond/overlap.h"
#include "05_ddp/models.h"
#include "05_ddp/trainer/batches.h"
#include "05_ddp/trainer/options.h"
#include "05_ddp/trainer/resume.h"
#include "05_ddp/trainer/trainer.h"
#include "05_ddp/beyond/sample_log.h"
#include "common/data/sampler.h"
#include "common/group/process_group.h"
#include "common/observe/flight_recorder.h"
#include "common/slurm/preemption.h"
#include "common/slurm/stop_vote.h"

namespace ddp {

class RunExtras {
 public:
  // Sets the per-rank batch from --global-batch (split_global_batch(), elastic.h), checks the
  // fault flags and --amp (UsageError), starts the flight recorder and --trace, opens the sample log.
  // Construct it once the group is joined.
  RunExtras(TrainerOptions& o, Group& group, const torch::Device& device);

  // Once the model, the DDP class, the loss function and the optimizer's factory exist, before
  // the optimizer: the DDP flags (apply_ddp_flags()), --zero (the factory then builds a
  // ZeroRedundancyOptimizer around the optimizer it built), --amp (around the loss function and
  // the factory: Note [Mixed precision and DDP]; UsageError without a GPU), and Join (`with
  // Join([ddp_model]):` around the loop; UsageError for flags it cannot apply), which turns the
  // sampler's padding off with --uneven-shards; --record-samples onto the batches.
  void compose(DistributedDataParallel& ddp, AnyModel& model, LossFn& loss_of, OptimizerFactory& make_optimizer,
               DeviceBatches& batches, DistributedSampler& sampler);
  // Before each step of `total_steps`, its micro-batches [first, last) on this rank, which holds
  // `own` samples this epoch. Before the run's first step (start()): the observers. Then the
  // flight recorder's step; --straggle-rank, --skip-rank; --amp's step; then Join's end of the
  // micro-batches (Join::end_of_batches): `last`, or `first` when this rank has run out of data.
  int64_t before_step(int64_t step, int64_t total_steps, int64_t own, int64_t first, int64_t last);
  // Held by main.cpp from the moment a step has trained to the step's end (its `}`), once the
  // step's validation and checkpoint (if any) are done: its destructor then runs after_step(),
  // unless an exception is leaving the step (as after_step() was not reached before).
  class [[nodiscard]] StepEnd {
   public:
    ~StepEnd() noexcept(false);  // after_step() may throw Exit (75): the run stops after this step
    StepEnd(const StepEnd&) = delete;
    StepEnd& operator=(const StepEnd&) = delete;

   private:
    friend class RunExtras;
    StepEnd(RunExtras& extras, int64_t step, Checkpoints& checkpoints);
    RunExtras& extras_;
    int64_t step_;
    Checkpoints& checkpoints_;
    int exceptions_;  // std::uncaught_exceptions() when made
  };
  // Once step `step` has trained, before it validates (at an epoch's end: `epoch_end`): with
  // --join, at an epoch's end every rank takes the model of the last rank to run out of data
  // (Join::sync_final_model). Returns the step's StepEnd, whose end runs after_step().
  StepEnd end_step(int64_t step, bool epoch_end, Checkpoints& checkpoints);
  // After training: the share of all-reduce time hidden behind backward (Note [Overlap share]),
  // or on a GPU with --trace from its kernels (Note [A GPU's timeline]); the bytes the gradients
  // take (Note [Gradients as bucket views]) and the process's peak memory; --trace's files
  // merged; --save-params.
  void end_training(const DistributedDataParallel& ddp);

 private:
  // At the end of each step, once its checkpoint (if any) is written (StepEnd). Chapter 06's
  // preemption: every rank votes (--drill-at-step raises the signal first), and when the vote
  // says stop, the step's checkpoint is written (unless it was), rank 0 requeues the Slurm job
  // and every rank exits 75 (throws Exit). Never after the last step. Then --kill-rank; the
  // trace flushed.
  void after_step(int64_t step, Checkpoints& checkpoints);
  // Before the run's first step, `step` (> 0: a resumed run, which the drills leave alone: they
  // rehearse once, and the run after a drill is the same command again; --save-init writes
  // nothing then). Attaches the observers: the overlap share and --skip-rank's comm hook to the
  // DDP class. Starts the GPU timeline.
  void start(int64_t step, int64_t total_steps);
  void report(const DistributedDataParallel& ddp);  // end_training()'s log lines

  const TrainerOptions& o_;
  Group& group_;
  torch::Device device_;
  int signal_;
  Faults faults_;
  OverlapShare overlap_;
  FlightRecorder recorder_;
  SampleLog samples_;
  StopVote stop_vote_;
  std::unique_ptr<GpuTimeline> gpu_timeline_;
  std::unique_ptr<Amp> amp_;
  std::unique_ptr<Join> join_;
  DistributedDataParallel* ddp_ = nullptr;
  bool started_ = false, fresh_run_ = true;
  int64_t total_steps_ = 0, step_ = 0;
};

}  // namespace ddp
