// defines: what the trainer writes: the rank-0 progress line, metrics.jsonl, TensorBoard scalars,
// and one log file per rank.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "05_ddp/trainer/run_lock.h"
#include "common/group/process_group.h"
#include "common/observe/tensorboard.h"

namespace ddp {

struct Evaluation {
  double loss = 0, accuracy = 0;
  int64_t images = 0;
};

std::string percent(double fraction);  // "83.44%"

// The folder of a run: <dir>/rank<r>.log for every rank; metrics.jsonl and tensorboard/ from
// rank 0; checkpoints/ written by rank 0 and read by all; run.lock, which rank 0 holds.
class RunOutput {
 public:
  // Claims the folder for this run first (UsageError on every rank when a live run holds it:
  // Note [One run per folder]), then opens the files.
  RunOutput(const std::string& dir, Group& group, const torch::Device& device);
  // The files alone, claiming nothing: for a test of one process.
  RunOutput(const std::string& dir, int rank);
  ~RunOutput();
  std::string dir, checkpoints;

  // Rank 0 only (the others return at once): one JSON line and the TensorBoard scalars.
  void training(int64_t step, int64_t epoch, double loss, double lr, double samples_per_s);
  // Every rank gets the same numbers; rank 0 prints and records them.
  void validation(const Evaluation& e, int64_t step);

 private:
  RunOutput(const std::string& dir, int rank, RunLock lock);
  void append_line(const nlohmann::ordered_json& record);  // to metrics.jsonl, keys in this order
  RunLock lock_;  // first: held before anything else is opened, released after everything is closed
  int rank_;
  std::FILE* jsonl_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tb_;
};

// The rank-0 console line every `every` steps: epoch, a bar, step, loss, lr, samples/s, ETA.
class Progress {
 public:
  Progress(RunOutput& out, int64_t total_steps, int64_t steps_per_epoch, int epochs, int64_t samples_per_step, int every);
  // `loss`: the step's loss, a float64 scalar on the model's device. On a GPU it is summed
  // there and read (a host sync) only on the steps that print; on the CPU every step. A loss
  // that is not finite stops the run (std::runtime_error) when it is read.
  void step_done(int64_t step, const torch::Tensor& loss, double lr);
  // "throughput: N samples/s over S steps": the whole run, its first step (warm-up) left out,
  // and the time of what is not training (validation, checkpoints) too: see Pause.
  void summary() const;

  // While one lives, the clock of samples/s stands still. On a GPU it first waits for the
  // training work already queued, so that the paused time holds none of it.
  class Pause {
   public:
    explicit Pause(Progress& p);
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    Progress& p_;
    double start_;
  };

 private:
  // On a GPU: waits until the steps queued so far have run (nothing on the CPU).
  void finish_queued_steps();

  RunOutput& out_;
  int64_t total_, per_epoch_, samples_per_step_;
  int epochs_, every_;
  double since_ = -1, loss_sum_ = 0;
  torch::Tensor device_sum_;  // on a GPU: the losses since the last line, not yet read
  int64_t steps_since_ = 0, untimed_ = 0;
  double first_done_ = -1, last_done_ = -1;
  double paused_ = 0, paused_since_line_ = 0;  // seconds in a Pause since the first step / the last line
  double paused_before_last_ = 0;  // paused_ when the last step was done: later pauses (the final validation) are outside
  int64_t timed_steps_ = -1;
};

}  // namespace ddp
