// 05_ddp: a complete data-parallel trainer, built on our own DistributedDataParallel class.
//
// The lesson is in ddp.h/ddp.cpp: chapter 04's hooks, with gradients packed into buckets whose
// all-reduce starts while backward is still running. This file is the trainer around it, the
// C++ twin of a Python DDP script: distributed sampler, warm-up + cosine schedule, distributed
// validation that counts every test image once, checkpoints and automatic resume, logs.
//
// Usage:
//   ./build-cpu/05_ddp --nproc-per-node 2 --model cnn               # forks 2 ranks (via 02_spawn)
//   ./build-cpu/05_ddp --rank 0 --world-size 2 &  ./build-cpu/05_ddp --rank 1 --world-size 2
//   torchrun --nproc-per-node 2 --no-python ./build-cuda/05_ddp --model cnn
//   ./build-cpu/05_ddp --nproc-per-node 4 --model cnn_bn --sync-bn --batch-size 2   # BatchNorm over all ranks
//   ./build-cpu/05_ddp --nproc-per-node 2 --reset       # start over instead of resuming
//   ./build-cpu/05_ddp --nproc-per-node 2 --drill-after 10   # rehearse a preemption (chapter 06), then rerun
//   ./build-cpu/05_ddp --nproc-per-node 2 --trace runs/trace.json   # a timeline for https://ui.perfetto.dev
//   ./build-cuda/05_ddp --nproc-per-node 1 --trace runs/trace.json  # on a GPU: its kernels too (Kineto)
//
// Expected output (scripts/run.sh: --nproc-per-node 2 --max-steps 300 --log-every 100; trimmed):
//   [rank 0/2] compute: cpu, BLAS OpenBLAS (openblas-pthread), 1 intra-op thread, deterministic
//   [rank 0/2] data: 60000 train / 10000 test images from /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
//   [rank 0/2] model mlp: 535818 parameters, all-reduced in buckets while backward runs (the first iteration in one)
//   [rank 0/2] epoch 1/3 [##........] step 100/300 loss 1.0969 lr 0.05 14038 samples/s ETA 0:01
//   [rank 0/2] epoch 1/3 [######....] step 300/300 loss 0.4022 lr 3.084e-06 12320 samples/s ETA 0:00
//   [rank 0/2] validation after step 300: loss 0.4110, accuracy 85.13% (10000 images)
//   [rank 0/2] checkpoint written: runs/05_ddp/checkpoints/ckpt-000000300.pt
//   [rank 0/2] overlap: 5.59% of all-reduce time hidden behind backward (0.00411s of all-reduce per step on rank 0)
//   [rank 0/2] check: every rank holds the same parameters: OK
//   [rank 0/2] check: test accuracy 85.13% is above 10.00% (chance): OK
//   [rank 0/2] params fingerprint 145f099619ccad5d (bit-identical runs print the same)

#include <signal.h>
#include <unistd.h>

#include <cmath>

#include "05_ddp/amp.h"
#include "05_ddp/batches.h"
#include "05_ddp/ddp.h"
#include "05_ddp/gpu_timeline.h"
#include "05_ddp/metrics.h"
#include "05_ddp/models.h"
#include "05_ddp/options.h"
#include "05_ddp/sync_batch_norm.h"
#include "05_ddp/trainer.h"
#include "common/state/checkpoint.h"
#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/data/fashion_mnist.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/slurm/preemption.h"
#include "common/compute/reproducible.h"
#include "common/group/process_group.h"
#include "common/observe/run_trace.h"
#include "common/data/sampler.h"
#include "common/data/toy_task.h"
#include "common/observe/trace.h"

namespace {

// Note [Warm-up and cosine]
// The learning rate climbs linearly for the first --warmup-steps (large steps on random weights
// make the loss jump), then falls along half a cosine to 0 at the last step.
double learning_rate(const ddp::TrainerOptions& o, int64_t step, int64_t total) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  const double progress = static_cast<double>(step - o.warmup_steps) / std::max<int64_t>(1, total - o.warmup_steps);
  return o.lr * 0.5 * (1 + std::cos(M_PI * progress));
}

// Note [Exact distributed validation]
// The sampler pads the test set so every rank gets the same number of images: with 10000
// images and 3 ranks, 2 images are seen twice. Each rank sums loss and hits over its shard,
// leaving out the padding, and one all-reduce adds the sums: the result is what one process
// gets on the whole test set, image for image: the same hits of the same 10000 images; the
// mean loss to float32 precision (tests/test_trainer.cpp checks both). Every rank evaluates
// rank 0's model: BatchNorm's running statistics are broadcast first (Note [Buffers]).
ddp::Evaluation evaluate(const ddp::AnyModel& model, ddp::DistributedDataParallel& ddp_model, const ddp::Dataset& test,
                         ddp::Group& group, int batch, const torch::Device& device) {
  ddp_model.sync_buffers();
  torch::NoGradGuard no_grad;
  model.module->eval();
  ddp::DistributedSampler sampler(test.size(), group.rank(), group.size(), /*shuffle=*/false);
  const std::vector<int64_t> idx = sampler.indices();
  auto sums = torch::zeros({3}, torch::kFloat64);  // loss sum, correct, images
  for (size_t at = 0; at < idx.size(); at += batch) {
    std::vector<int64_t> ids;
    for (size_t k = at; k < std::min(idx.size(), at + batch); ++k) {
      if (!sampler.is_padding(static_cast<int64_t>(k))) ids.push_back(idx[k]);
    }
    if (ids.empty()) continue;
    auto sel = torch::tensor(ids, torch::kInt64);
    auto logits = model.forward(test.images.index_select(0, sel).to(device));
    auto labels = test.labels.index_select(0, sel).to(device);
    auto losses = torch::nn::functional::cross_entropy(logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    sums[0] += losses.to(torch::kFloat64).sum().cpu();
    sums[1] += logits.argmax(1).eq(labels).sum().cpu().to(torch::kFloat64);
    sums[2] += static_cast<double>(ids.size());
  }
  std::vector<torch::Tensor> t{sums.to(device)};
  ddp::run(group, "all-reduce", "validation", 3 * 8, [&] { return group.pg->allreduce(t); });
  model.module->train();
  auto s = t[0].cpu();
  return {s[0].item<double>() / s[2].item<double>(), s[1].item<double>() / s[2].item<double>(), s[2].item<int64_t>()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"05_ddp: train an MLP or a CNN on Fashion-MNIST with our own DistributedDataParallel"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::TrainerOptions o;
  ddp::add_trainer_options(app, o);
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    if (o.nproc_per_node) return ddp::relaunch_with_02_spawn(argc, argv, *o.nproc_per_node, flags, o);
    ddp::make_reproducible(o.deterministic == "on");  // before CUDA starts: Note [Reproducible GPU runs]
    // A scheduler's warning signal only sets a flag; see Note [Preemption and requeue].
    const int preempt_signal = ddp::parse_signal(o.requeue_signal);
    ddp::watch_for_preemption(preempt_signal);
    // 1. Join the group (chapter 01); each rank also keeps its own log file.
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    const torch::Device device = ddp::device_for(group.info);
    ddp::split_global_batch(o, world);  // --global-batch: the per-rank batch follows the world
    const ddp::Faults faults(o, rank, world);  // --kill-rank, --straggle-rank, --skip-rank
    ddp::RunOutput out(o.out, rank);
    // Every collective is recorded, so that a failed one says which rank is to blame (Note
    // [Flight recorder]); with --trace each rank also draws its timeline (Note [Trace files]).
    ddp::FlightRecorder recorder(group);
    ddp::open_trace(o.trace, group);

    // 2. Data: every rank holds the whole set; the sampler picks this rank's share.
    ddp::Dataset train = o.synthetic ? ddp::synthetic_dataset(o.train_samples.value_or(60000), true)
                                     : ddp::load_fashion_mnist(o.data_dir, true);
    ddp::Dataset test = o.synthetic ? ddp::synthetic_dataset(o.test_samples.value_or(10000), false)
                                    : ddp::load_fashion_mnist(o.data_dir, false);
    if (o.train_samples) train = ddp::first_n(train, *o.train_samples);
    if (o.test_samples) test = ddp::first_n(test, *o.test_samples);
    ddp::log0("compute: " + ddp::describe_compute(device) + (o.deterministic == "on" ? ", deterministic" : ", --deterministic off"));
    ddp::log0("data: " + std::to_string(train.size()) + " train / " + std::to_string(test.size()) + " test images from " + train.source);
    ddp::DeviceBatches batches(train, device);  // once on the GPU when it fits: Note [The data path on a GPU]
    if (device.is_cuda()) ddp::log0("data: " + batches.where());
    ddp::DistributedSampler sampler(train.size(), rank, world, /*shuffle=*/true, o.seed);
    const int64_t n_batches = (sampler.num_samples() + o.batch_size - 1) / o.batch_size;  // per epoch, last one short
    const int64_t steps_per_epoch = (n_batches + o.grad_accum - 1) / o.grad_accum;
    const int64_t total_steps = std::min<int64_t>(o.epochs * steps_per_epoch, o.max_steps.value_or(INT32_MAX));
    const ddp::SamplerState sampler_state{o.seed, steps_per_epoch, int64_t{world} * o.batch_size * o.grad_accum, world};  // into every checkpoint

    // 3. The model, the same on every rank (DDP broadcasts rank 0's weights), and a stock optimizer.
    ddp::AnyModel model = ddp::make_model(o.model, o.seed, o.sync_bn ? ddp::sync_batch_norm(group) : nullptr);
    model.module->to(device);
    std::vector<torch::Tensor> params = model.module->parameters();
    if (rank == 0 && !o.save_init.empty()) ddp::toy::save_params(params, o.save_init);
    ddp::DistributedDataParallel ddp_model(model.module, group, o.one_bucket ? ddp::kOneBucket : static_cast<size_t>(o.bucket_cap_mb * ddp::kMiB));
    ddp_model.register_comm_hook(ddp::parse_comm_hook(o.comm_hook));  // --comm-hook: Note [Communication hooks]
    std::unique_ptr<torch::optim::Optimizer> optimizer = ddp::make_trainer_optimizer(params, o);
    ddp::Amp amp(o.amp, device);  // --amp bf16|fp16 on a GPU; see Note [Mixed precision and DDP]
    ddp::log0("model " + o.model + ": " + std::to_string(ddp::count_parameters(params)) +
              (o.one_bucket ? " parameters, all-reduced in one bucket once backward has ended (--one-bucket: no overlap)"
                            : " parameters, all-reduced in buckets while backward runs (the first iteration in one)") +
              (o.comm_hook == "none" ? "" : ", compressed to " + o.comm_hook + " on the wire"));

    // 4. Resume from the newest readable checkpoint, unless --reset (see Note [Atomic checkpoints]).
    //    A restarted attempt (02_spawn/torchrun --max-restarts) gets the same flags: its --reset
    //    would throw away the progress it restarts to keep, so only the first attempt resets.
    int64_t step = 0;
    const bool restarted = ddp::restart_count() > 0;
    if (o.reset && restarted) ddp::log0("--reset applies to the first attempt; this is a restart: resuming");
    if (o.reset && !restarted) {
      ddp::remove_checkpoints(out.checkpoints, group);  // or a later resume would find the old run's
    } else {
      const auto expect = o.eval_only ? std::nullopt : std::optional<ddp::SamplerState>(sampler_state);
      step = ddp::resume(out.checkpoints, device, expect, *model.module, *optimizer, ddp_model, group);
    }
    if (o.eval_only) {
      out.validation(evaluate(model, ddp_model, test, group, o.batch_size, device), step);
      return ddp::kExitOk;
    }

    // 5. Train. Each step: o.grad_accum micro-batches, all but the last under no_sync().
    ddp::Progress progress(out, total_steps, steps_per_epoch, o.epochs, world * o.batch_size * o.grad_accum, o.log_every);
    std::optional<ddp::Evaluation> last_eval;
    std::vector<int64_t> order;  // this epoch's indices for this rank
    ddp::SampleLog sample_log(o.record_samples, rank);  // --record-samples: which images each step saw
    ddp::StopVote stop_vote(group);  // Note [Stopping together without a sync per step]
    ddp::GpuTimeline gpu_timeline(device);  // with --trace on a GPU: what the GPU ran (Note [A GPU's timeline])
    const bool fresh_run = step == 0;  // the drills rehearse once: not after a resume
    if (o.drill_after && fresh_run) ddp::drill_preemption(preempt_signal, *o.drill_after);
    for (; step < total_steps; ++step) {
      recorder.set_step(step);
      faults.before_step(step, ddp_model);
      const int64_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
      if (order.empty() || in_epoch == 0) {
        sampler.set_epoch(epoch);
        order = sampler.indices();
        batches.set_order(order);
      }
      const double lr = learning_rate(o, step, total_steps);
      for (auto& g : optimizer->param_groups()) g.options().set_lr(lr);
      optimizer->zero_grad();
      const int64_t first = in_epoch * o.grad_accum, last = std::min(n_batches, first + o.grad_accum);
      // Summed on the model's device: reading it every step would wait for the GPU every step.
      torch::Tensor step_loss = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
      for (int64_t b = first; b < last; ++b) {
        auto no_sync = b + 1 < last ? ddp_model.no_sync() : nullptr;  // communicate on the last only
        const int64_t from = b * o.batch_size, to = std::min<int64_t>(from + o.batch_size, order.size());
        sample_log.record(step, order, from, to);
        torch::Tensor images, labels, loss;
        {
          ddp::Span span("data");
          std::tie(images, labels) = batches.get(from, to);
        }
        {
          ddp::Span span("forward");
          ddp_model.sync_buffers();  // rank 0's BatchNorm statistics everywhere (Note [Buffers]); none: nothing
          auto in_autocast = amp.autocast();
          loss = torch::nn::functional::cross_entropy(model.forward(images), labels) / static_cast<double>(last - first);
          step_loss += loss.detach().to(torch::kFloat64);
        }
        ddp::Span span("backward");
        amp.scale(loss).backward();  // DDP's hooks average the gradients on the way
      }
      if (ddp::Span span("optimizer"); amp.unscale_and_check(params)) {
        optimizer->step();
      } else {
        ddp::log0("fp16: inf/NaN gradients at step " + std::to_string(step) + ": step skipped, loss scale halved");
      }
      progress.step_done(step, step_loss, lr);
      if (o.drill_at_step == step + 1 && fresh_run) ::raise(preempt_signal);  // as if the scheduler sent it now

      const bool epoch_end = in_epoch == steps_per_epoch - 1 || step + 1 == total_steps;
      if (epoch_end) {
        ddp::Progress::Pause paused(progress);  // samples/s counts training only
        out.validation(*(last_eval = evaluate(model, ddp_model, test, group, o.batch_size, device)), step + 1);
      }
      // Preempted: every rank stops after this same step, with a checkpoint, and the job is requeued.
      const bool last_step = step + 1 == total_steps;
      const bool preempted = stop_vote.next(ddp::preemption_signal() != 0, /*post=*/!last_step) && !last_step;
      if (preempted || epoch_end || (o.ckpt_every && (step + 1) % *o.ckpt_every == 0)) {
        ddp::Progress::Pause paused(progress);
        ddp::checkpoint(out.checkpoints, step + 1, sampler_state, o.keep, *model.module, *optimizer, ddp_model, group);
      }
      if (preempted) return ddp::stop_for_requeue(group, step + 1, ddp::preemption_signal());
      faults.after_step(step);
      ddp::trace().flush();
    }

    progress.summary();
    const auto& overlap = ddp_model.overlap();  // Note [Overlap share], from the same clock as --trace
    if (gpu_timeline.on()) {
      const ddp::GpuTimeline::Overlap gpu = gpu_timeline.stop();
      ddp::log0("GPU timeline: " + std::to_string(gpu.gpu_events) + " kernels and copies in the trace" +
                (gpu.kernels == 0 ? std::string(world == 1 ? "; no gradient all-reduce kernel (a world of one: NCCL has nothing to add)"
                                                           : "; no gradient all-reduce kernel recognised (is_gradient_allreduce)")
                                  : "; overlap: " + ddp::percent(gpu.share()) + " of all-reduce kernel time ran beside compute kernels (" +
                                        std::to_string(gpu.kernels) + " all-reduce kernels, " + ddp::seconds(gpu.comm_us / 1e6) + " in all)"));
    } else if (device.is_cuda()) {
      ddp::log0("overlap: on a GPU the host's clock cannot see it; --trace measures it from the GPU's kernels");
    } else if (overlap.backwards > 0) {
      ddp::log0("overlap: " + ddp::percent(overlap.share()) + " of all-reduce time hidden behind backward (" +
                ddp::seconds(overlap.comm_us / overlap.backwards / 1e6) + " of all-reduce per step on rank 0)");
    }
    ddp::finish_trace(o.trace, group);

    // 6. Check the result: the ranks agree bit for bit, and the model learned something.
    const bool same = ddp::toy::replicas_identical(group, params);
    ddp::log0(std::string("check: every rank holds the same parameters: ") + (same ? "OK" : "FAILED"));
    if (!last_eval) last_eval = evaluate(model, ddp_model, test, group, o.batch_size, device);
    const double floor = o.expect_accuracy.value_or(0.1);
    const bool learned = last_eval->accuracy > floor;
    ddp::log0("check: test accuracy " + ddp::percent(last_eval->accuracy) + " is above " + ddp::percent(floor) +
              (o.expect_accuracy ? " (--expect-accuracy)" : " (chance)") + ": " + (learned ? "OK" : "FAILED"));
    ddp::log0("params fingerprint " + ddp::toy::fingerprint(params) + " (bit-identical runs print the same)");
    if (rank == 0 && !o.save_params.empty()) ddp::toy::save_params(params, o.save_params);
    DDP_CHECK(same, "the ranks' parameters differ");
    DDP_CHECK(learned, "test accuracy " << last_eval->accuracy << " is not above " << floor);
    group.pg->barrier()->wait();
    return ddp::kExitOk;
  });
}
