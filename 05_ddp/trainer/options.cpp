// provides: add_trainer_options(): the one definition of 05's flags and their limits.
#include "05_ddp/trainer/options.h"

#include <string>

#include "common/basics/cli.h"

namespace ddp {

void add_trainer_options(CLI::App& app, TrainerOptions& o) {
  app.add_option("--model", o.model, "mlp, cnn, cnn_bn (the CNN with BatchNorm), or mlp_branch (the MLP with a head some batches skip)")
      ->check(CLI::IsMember({"mlp", "cnn", "cnn_bn", "mlp_branch"}));
  app.add_flag("--find-unused-parameters", o.find_unused_parameters,
               "After each forward, find the parameters the output does not reach and reduce them as unused, as PyTorch's "
               "find_unused_parameters=True (--model mlp_branch needs it)");
  app.add_flag("--sync-bn", o.sync_bn, "SyncBatchNorm: BatchNorm statistics over all ranks' batches, not each rank's own (--model cnn_bn)");
  app.add_option("--epochs", o.epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  auto* batch = app.add_option("--batch-size", o.batch_size, "Samples per rank per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--global-batch", o.global_batch,
                 "Samples per optimizer step over all ranks; the per-rank batch is this / (world size x --grad-accum), so "
                 "a run can resume at another world size")
      ->check(CLI::PositiveNumber)
      ->excludes(batch);
  app.add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step, all but the last under no_sync()")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", o.optimizer, "sgd (with --momentum) or adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--lr", o.lr, "Peak learning rate")->check(finite_number())->check(CLI::PositiveNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(finite_number())->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", o.weight_decay, "Weight decay")->check(finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", o.warmup_steps, "Linear warm-up steps before the cosine decay")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps in all")->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "Gradient bucket size in MiB (25 is PyTorch's)")
      ->check(finite_number())->check(CLI::Range(0.001, 1024.0));
  app.add_flag("--one-bucket", o.one_bucket,
               "Every gradient in one bucket, all-reduced once backward has ended: no overlap (what buckets are measured against)");
  app.add_flag("--uneven-shards", o.uneven_shards,
               "The sampler without padding (no repeated samples): ranks may get different numbers of batches, which "
               "hangs DDP at an epoch's end unless --join");
  app.add_flag("--join", o.join,
               "PyTorch's Join: a rank out of data shadows the others' all-reduces with zeros until the epoch ends, then every "
               "rank takes the model of the last to run out (needs --uneven-shards)");
  app.add_flag("--divide-by-live-ranks", o.divide_by_live_ranks,
               "With --join: average the gradients over the ranks still training, not the world size "
               "(divide_by_initial_world_size=False)");
  app.add_flag("--gradient-as-bucket-view", o.gradient_as_bucket_view,
               "Each .grad() a view into its bucket, as PyTorch's gradient_as_bucket_view=True: gradients stored once, not twice");
  app.add_flag("--zero", o.zero,
               "Shard the optimizer state over the ranks, as PyTorch's ZeroRedundancyOptimizer (ZeRO stage 1): each rank steps "
               "its share of the parameters and broadcasts them");
  app.add_option("--comm-hook", o.comm_hook,
                 "Gradient compression for the all-reduces, as PyTorch's DDP communication hooks: fp16 (fp16_compress_hook) or "
                 "bf16 (bf16_compress_hook): half the bytes, gradients rounded on the way; powersgd (powerSGD_hook): each "
                 "weight matrix sent as two thin factors of --powersgd-rank columns")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}));
  app.add_option("--powersgd-rank", o.powersgd_rank, "--comm-hook powersgd: the rank of the approximation (1: PyTorch's default)");
  app.add_option("--powersgd-start-iter", o.powersgd_start_iter,
                 "--comm-hook powersgd: plain all-reduces for this many steps, compressed ones after (default 100, the default "
                 "warm-up; PyTorch's 1000)");
  app.add_option("--amp", o.amp, "Mixed precision on a GPU: bf16 (autocast) or fp16 (autocast + gradient scaling)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--deterministic", o.deterministic,
                 "on: the same run gives bit-identical results on a GPU too (cuDNN/cuBLAS deterministic); off: "
                 "LibTorch's faster defaults")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--seed", o.seed, "Seed of the initial weights and of the sampler's shuffle");
  app.add_option("--data-dir", o.data_dir, "Folder with Fashion-MNIST's four .gz IDX files (where Debian's dataset-fashion-mnist puts them)");
  app.add_flag("--synthetic", o.synthetic, "Generated images instead of Fashion-MNIST");
  app.add_option("--train-samples", o.train_samples, "Use only the first N training samples")->check(CLI::PositiveNumber);
  app.add_option("--test-samples", o.test_samples, "Use only the first N test samples")->check(CLI::PositiveNumber);
  app.add_option("--out", o.out,
                 "Folder for checkpoints/, rank<r>.log, metrics.jsonl, tensorboard/, run.lock [default: runs/05_ddp/<model>-<optimizer>-<data>, "
                 "<data> fashion-mnist or synthetic, then -N with --train-samples N]");
  app.add_option("--log-every", o.log_every, "Progress line every N steps")->check(CLI::PositiveNumber);
  app.add_option("--ckpt-every", o.ckpt_every, "Checkpoint every N steps, besides each epoch's end")->check(CLI::PositiveNumber);
  app.add_option("--keep", o.keep, "Checkpoints to keep")->check(CLI::PositiveNumber);
  app.add_flag("--reset", o.reset, "Start over instead of resuming from the latest checkpoint");
  app.add_flag("--eval-only", o.eval_only, "Evaluate the latest checkpoint (or the initial weights) and stop");
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "Fail an allocation past this many MiB of CPU tensors per rank, as a full GPU does; the peak is reported "
                 "(Note [A memory limit on a CPU])")
      ->check(finite_number())->check(CLI::PositiveNumber);
  app.add_option("--expect-accuracy", o.expect_accuracy, "Fail unless the final test accuracy reaches this (0-1)")
      ->check(finite_number())->check(CLI::Range(0.0, 1.0));
  app.add_option("--save-init", o.save_init, "Rank 0 writes the initial parameters here (torch::pickle_save); a resumed run writes none");
  app.add_option("--save-params", o.save_params, "Rank 0 writes the final parameters here (torch::pickle_save)");
  app.add_option("--nproc-per-node", o.nproc_per_node, "Start this many ranks here, through 02_spawn")->check(CLI::PositiveNumber);
  app.add_option("--on-failure", o.on_failure,
                 "With --nproc-per-node: 02_spawn's --on-failure (stop the others, or wait and let them diagnose the failure themselves)")
      ->check(CLI::IsMember({"stop", "wait"}));
  app.add_option("--max-restarts", o.max_restarts,
                 "With --nproc-per-node: when a rank fails, restart all ranks up to N times; they resume from the last checkpoint")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-rank", o.kill_rank, "Fault injection: this rank kills itself (SIGKILL) ...")->check(CLI::NonNegativeNumber);
  app.add_option("--kill-at-step", o.kill_at_step, "... after finishing this step (1 is the first, as in the progress lines)")->check(CLI::PositiveNumber);
  app.add_flag("--kill-node", o.kill_node,
               "... and its launcher with it (torchrun's agent or 02_spawn: the parent process), as when a whole node dies");
  app.add_option("--straggle-rank", o.straggle_rank, "Fault injection: this rank is a straggler ...")->check(CLI::NonNegativeNumber);
  app.add_option("--straggle-ms", o.straggle_ms, "... sleeping this many milliseconds before every step")->check(CLI::PositiveNumber);
  app.add_option("--skip-rank", o.skip_rank, "Fault injection: this rank does not start bucket 0's all-reduce ...")->check(CLI::NonNegativeNumber);
  app.add_option("--skip-at-step", o.skip_at_step, "... in this step (1 is the first)")->check(CLI::PositiveNumber);
  app.add_option("--record-samples", o.record_samples,
                 "Each rank appends a line per micro-batch, its step (1 is the first) and dataset indices, to <path>.rank<r> (which images each rank saw)");
  app.add_option("--trace", o.trace,
                 "Write a Chrome/Perfetto timeline: each rank <stem>.rank<r>.json, merged by rank 0 into this file at the end");
  app.add_option("--requeue-signal", o.requeue_signal,
                 "The scheduler's warning signal: on it, every rank stops after the next step (a signal seen in step N: "
                 "after step N+1; in the last two steps the run ends as usual), checkpoints, requeues the Slurm job and "
                 "exits 75 (USR2 as in sbatch --signal=USR2@90)");
  app.add_option("--drill-after", o.drill_after,
                 "Rehearse a preemption: each rank sends itself --requeue-signal this many seconds into training (not in a resumed run)")
      ->check(finite_number())->check(CLI::PositiveNumber);
  app.add_option("--drill-at-step", o.drill_at_step,
                 "The same drill after step N (counted from 1, as the progress lines): the run stops after step N+1, the same step every time (not in a resumed run)")
      ->check(CLI::NonNegativeNumber);
}

std::string data_name(const TrainerOptions& o) { return o.synthetic ? "synthetic" : "fashion-mnist"; }

std::string run_folder(const TrainerOptions& o, const std::string& chapter) {
  if (!o.out.empty()) return o.out;
  return "runs/" + chapter + "/" + o.model + "-" + o.optimizer + "-" + data_name(o) +
         (o.train_samples ? "-" + std::to_string(*o.train_samples) : std::string());
}

}  // namespace ddp
