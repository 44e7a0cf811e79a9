// defines: the trainer's own flags (the shared ones are in common/basics/cli.h), and the run's folder.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace ddp {

struct TrainerOptions {
  // model and optimisation
  std::string model = "mlp";  // mlp | cnn | cnn_bn | mlp_branch
  bool sync_bn = false;       // BatchNorm statistics over all ranks (Note [SyncBatchNorm])
  int epochs = 3;
  int batch_size = 64;  // per rank and micro-batch, as a Python DataLoader's batch_size
  std::optional<int> global_batch;  // or this, over all ranks and micro-batches: the batch size follows the world
  int grad_accum = 1;   // micro-batches per optimizer step (all but the last under no_sync())
  std::string optimizer = "sgd";  // sgd (with momentum) | adamw
  double lr = 0.05, momentum = 0.9, weight_decay = 0;
  int warmup_steps = 100;
  std::optional<int> max_steps;  // stop early (short runs, tests)
  double bucket_cap_mb = 25;
  bool one_bucket = false;  // every gradient in one bucket, after backward: no overlap
  std::string amp = "off";  // off | bf16 | fp16 (CUDA only)
  bool find_unused_parameters = false;  // Note [Unused parameters]
  bool uneven_shards = false;   // the sampler without padding: ranks get different numbers of batches
  bool join = false;            // PyTorch's Join: ranks out of data shadow the others (Note [Uneven inputs and Join])
  bool divide_by_live_ranks = false;  // with --join: divide_by_initial_world_size=False
  bool gradient_as_bucket_view = false;  // each .grad() a view into its bucket (Note [Gradients as bucket views])
  bool zero = false;  // ZeRO-1: the optimizer state sharded over the ranks (Note [ZeRO-1: optimizer state sharded])
  std::string comm_hook = "none";  // none | fp16 | bf16 | powersgd: what the all-reduces send (Note [Communication hooks])
  std::optional<int> powersgd_rank, powersgd_start_iter;  // --comm-hook powersgd's (Note [PowerSGD]); unset: PowerSgdOptions'
  std::string deterministic = "on";  // on | off: see Note [Reproducible GPU runs]
  uint64_t seed = 0;
  // data
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  bool synthetic = false;
  std::optional<int> train_samples, test_samples;  // use only the first N (quick runs)
  // output, checkpoints
  std::string out;  // "": run_folder() names it after the run
  int log_every = 50;
  std::optional<int> ckpt_every;  // steps; always at the end of each epoch
  int keep = 3;
  bool reset = false, eval_only = false;
  std::optional<double> expect_accuracy;
  std::optional<double> memory_limit_mb;  // per rank, of tensors (Note [A memory limit on a CPU])
  std::string save_init, save_params;
  // launching and faults
  std::optional<int> nproc_per_node;
  std::string on_failure;             // passed on to 02_spawn with --nproc-per-node
  std::optional<int> max_restarts;    // likewise
  std::optional<int> kill_rank, kill_at_step;
  bool kill_node = false;  // with --kill-rank: its launcher (parent) too, as a node that dies
  std::optional<int> straggle_rank;
  int straggle_ms = 0;
  std::optional<int> skip_rank, skip_at_step;
  // seeing inside the run
  std::string record_samples;  // each rank writes the dataset indices of every step to <path>.rank<r>
  std::string trace;  // Chrome/Perfetto timeline: <stem>.rank<r>.json per rank, merged into this file
  // preemption (see Note [Preemption and requeue])
  std::string requeue_signal = "USR2";
  std::optional<double> drill_after;
  std::optional<int64_t> drill_at_step;
};

void add_trainer_options(CLI::App& app, TrainerOptions& o);

// "fashion-mnist" or "synthetic" (--synthetic): the data a run trains on, part of what it is.
std::string data_name(const TrainerOptions& o);

// Note [A run folder per run]
// A run resumes from its folder by default, so two runs that share one collide: a CNN run
// started in an MLP's folder is refused (Note [Never lose a run]), and a --reset in one deletes
// the other's checkpoints. If every example of the READMEs shared runs/05_ddp, a learner
// running them in order would walk into those refusals. So without --out the folder is named after
// what a resume must match and what a learner changes from one example to the next:
// runs/05_ddp/<model>-<optimizer>-<data>, with -<N> for --train-samples N (for example
// runs/05_ddp/mlp-sgd-fashion-mnist, runs/05_ddp/cnn-sgd-synthetic-4096), as TensorBoard's
// SummaryWriter(comment=...) names a run after its settings; `tensorboard --logdir runs/05_ddp`
// then shows each as a run of its own. What may change on a resume (the world size, the
// per-rank batch of one --global-batch, the learning rate, the bucket cap) is not in the name.
// Nor are the seed and the global batch: the same experiment with another of them is refused
// with a message that names the difference, rather than quietly started afresh elsewhere.
//
// The run's folder: --out, else the one Note [A run folder per run] describes (runs/<chapter>/...).
std::string run_folder(const TrainerOptions& o, const std::string& chapter = "05_ddp");

}  // namespace ddp
