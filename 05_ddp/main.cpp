// 05_ddp: a complete data-parallel trainer, built on our own DistributedDataParallel class.
//
// Read: steps 1-7 in order (the trainer: the C++ twin of a Python DDP script), then the class
// (README.md lists what). A line that composes a feature past the lesson (beyond/, a "Going
// further" page; chapter 06) says `past the lesson:` and what it is: step over it at first.
//
// Usage:
//   ./build-cpu/05_ddp --nproc-per-node 2                   # forks 2 ranks (02_spawn's launcher)
//   ./build-cpu/05_ddp --rank 0 --world-size 2 &  ./build-cpu/05_ddp --rank 1 --world-size 2
//   .venv/bin/torchrun --nproc-per-node 2 --no-python ./build-cuda/05_ddp --model cnn
//   ./build-cpu/05_ddp --nproc-per-node 2 --reset           # start over instead of resuming
//
// Expected output (./build-cpu/05_ddp --nproc-per-node 2 --max-steps 300 --log-every 100; trimmed):
//   [rank 0/2] data: 60000 train / 10000 test images from /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
//   [rank 0/2] model mlp: 535818 parameters, all-reduced in buckets while backward runs
//   [rank 0/2] buckets rebuilt in the order gradients became ready: 1 bucket: bucket0 2.04 MiB (6 tensors, fc3.bias to
//              fc1.weight); a bucket closes once it holds 1 MiB (the first one filled) or 25 MiB (--bucket-cap-mb)
//   [rank 0/2] epoch 1/3 [######....] step 300/300 mean loss 0.4022 lr 3.084e-06 7030 samples/s ETA 0:00
//   [rank 0/2] validation after step 300: loss 0.4110, accuracy 85.13% (10000 images)
//   [rank 0/2] checkpoint written: runs/05_ddp/mlp-sgd-fashion-mnist/checkpoints/ckpt-000000300.pt
//   [rank 0/2] check: every rank holds the same parameters: OK
//   [rank 0/2] check: test accuracy 85.13% is above 10.00% (chance): OK
//   [rank 0/2] params fingerprint 145f099619ccad5d (bit-identical runs print the same)

#include "05_ddp/trainer/batches.h"
#include "05_ddp/trainer/launch.h"
#include "05_ddp/ddp.h"
#include "05_ddp/beyond/extras.h"
#include "05_ddp/trainer/metrics.h"
#include "05_ddp/models.h"
#include "05_ddp/trainer/resume.h"
#include "05_ddp/beyond/sync_batch_norm.h"
#include "05_ddp/trainer/trainer.h"
#include "05_ddp/trainer/validation.h"
#include "common/basics/failure.h"
#include "common/compute/reproducible.h"
#include "common/compute/tensor_memory.h"
#include "common/data/fashion_mnist.h"
#include "common/data/sampler.h"
#include "common/data/toy_task.h"
#include "common/observe/trace.h"

int main(int argc, char** argv) {
  CLI::App app{"05_ddp: train an MLP or a CNN on Fashion-MNIST with our own DistributedDataParallel"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::TrainerOptions o;
  ddp::add_trainer_options(app, o);
  ddp::parse_flags(app, argc, argv);

  // One rank's run, steps 1-7. With --nproc-per-node, chapter 02's launcher (linked in) forks the
  // ranks from this process, and each runs this (trainer/launch.h).
  auto one_rank = [&] {
    ddp::make_reproducible(o.deterministic == "on");  // before CUDA starts: Note [Reproducible GPU runs]
    ddp::listen_for_preemption(o.requeue_signal);  // past the lesson: chapter 06's (before joining)

    // 1. Join the group (chapter 01); each rank also keeps its own log file in the run's folder.
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    const torch::Device device = ddp::device_for(group.info);
    ddp::RunExtras extras(o, group, device);  // past the lesson: what the trainer does besides its lesson (extras.h)
    ddp::RunOutput out(ddp::run_folder(o), group, device);  // one live run per folder: Note [One run per folder]

    // 2. Data: every rank holds the whole set; the sampler picks this rank's share.
    auto [train, test] = ddp::load_datasets(o);  // Fashion-MNIST, or --synthetic
    ddp::log0("compute: " + ddp::describe_compute(device) + (o.deterministic == "on" ? ", deterministic" : ", --deterministic off"));
    ddp::log0("data: " + std::to_string(train.size()) + " train / " + std::to_string(test.size()) + " test images from " + train.source);
    ddp::DeviceBatches batches(train, device);  // once on the GPU when it fits: Note [The data path on a GPU]
    ddp::TensorMemory::start(o.memory_limit_mb);  // past the lesson: this rank's tensors counted from here (07's lesson)
    ddp::DistributedSampler sampler(train.size(), rank, world, /*shuffle=*/true, o.seed);
    const int64_t n_batches = (sampler.num_samples() + o.batch_size - 1) / o.batch_size;  // per epoch, last one short
    const int64_t steps_per_epoch = (n_batches + o.grad_accum - 1) / o.grad_accum;
    const int64_t total_steps = std::min<int64_t>(o.epochs * steps_per_epoch, o.max_steps.value_or(INT32_MAX));
    const ddp::SamplerState sampler_state{o.seed, steps_per_epoch, int64_t{world} * o.batch_size * o.grad_accum, world,
                                          ddp::data_name(o), train.size()};  // into every checkpoint

    // 3. The model, the same on every rank (DDP broadcasts rank 0's weights), and a stock optimizer.
    ddp::AnyModel model = ddp::make_model(o.model, o.seed, o.sync_bn ? ddp::sync_batch_norm(group) : nullptr);
    model.module->to(device);
    std::vector<torch::Tensor> params = model.module->parameters();
    ddp::DistributedDataParallel ddp_model(model.module, group, o.one_bucket ? ddp::kOneBucket : static_cast<size_t>(o.bucket_cap_mb * ddp::kMiB));
    // The loss of a batch, as Python's criterion(model(images), labels).
    ddp::LossFn loss_of = [&model](const torch::Tensor& images, const torch::Tensor& labels) {
      return torch::nn::functional::cross_entropy(model.forward(images), labels);
    };
    ddp::OptimizerFactory make_optimizer = ddp::optimizer_factory(o);  // SGD with momentum, or AdamW (--optimizer)
    extras.compose(ddp_model, model, loss_of, make_optimizer, batches, sampler);  // past the lesson: --comm-hook, --zero, --amp, Join, ...
    std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(params);
    ddp::log0("model " + o.model + ": " + std::to_string(ddp::count_parameters(params)) + " parameters, all-reduced " +
              (o.one_bucket ? "in one bucket once backward has ended (--one-bucket: no overlap)" : "in buckets while backward runs"));

    // 4. Resume from the newest readable checkpoint, unless --reset (see Note [Atomic checkpoints]).
    ddp::Checkpoints checkpoints(out.checkpoints, sampler_state, o.keep, *model.module, *optimizer, ddp_model, group);
    int64_t step = checkpoints.resume_or_reset(o, device);
    if (o.eval_only)  // past the lesson: --eval-only, the checkpoint validated, nothing trained
      return out.validation(ddp::evaluate(model, ddp_model, test, group, o.batch_size, device), step), ddp::kExitOk;
    if (step > 0 && step >= total_steps) ddp::say_already_finished(o, out.dir, step, total_steps);

    // 5. Train. Each step: o.grad_accum micro-batches, all but the last under no_sync().
    ddp::Progress progress(out, total_steps, steps_per_epoch, o.epochs, world * o.batch_size * o.grad_accum, o.log_every);
    std::optional<ddp::Evaluation> last_eval;
    std::vector<int64_t> order;  // this epoch's indices for this rank
    for (; step < total_steps; ++step) {
      const int64_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
      if (order.empty() || in_epoch == 0) {
        sampler.set_epoch(epoch);
        order = sampler.indices();
        batches.set_order(order);
      }
      const double lr = ddp::learning_rate(o, step, total_steps);  // warm-up, then cosine (trainer.h)
      for (auto& g : optimizer->param_groups()) g.options().set_lr(lr);
      ddp::zero_grad(*optimizer);  // optimizer.zero_grad(), as Python's (trainer.h)
      // This rank's micro-batches of the step: [first, last), fewer when its shard has run out (Join).
      const int64_t first = in_epoch * o.grad_accum, all = std::min(n_batches, first + o.grad_accum);
      const int64_t last = extras.before_step(step, total_steps, order.size(), first, all);  // past the lesson: faults, Join
      // Summed on the model's device: reading it every step would wait for the GPU every step.
      torch::Tensor step_loss = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
      for (int64_t b = first; b < last; ++b) {
        auto no_sync = b + 1 < last ? ddp_model.no_sync() : nullptr;  // communicate on the last only
        const int64_t from = b * o.batch_size, to = std::min<int64_t>(from + o.batch_size, order.size());
        torch::Tensor images, labels, loss;
        {
          ddp::Span span("data");  // the spans are what --trace draws
          std::tie(images, labels) = batches.get(from, to);
        }
        {
          ddp::Span span("forward");
          ddp_model.sync_buffers();  // as DDP's forward: rank 0's buffers everywhere (Note [Buffers]); mlp, cnn: none
          loss = loss_of(images, labels) / static_cast<double>(last - first);
          step_loss += loss.detach().to(torch::kFloat64);
        }
        ddp::Span span("backward");
        loss.backward();  // DDP's hooks average the gradients on the way
      }
      {
        ddp::Span span("optimizer");
        if (first < last) optimizer->step();  // a rank out of data (Join) skips it
      }
      progress.step_done(step, step_loss, lr);

      // 6. Validate at each epoch's end; checkpoint then and every --ckpt-every steps.
      const bool epoch_end = in_epoch == steps_per_epoch - 1 || step + 1 == total_steps;
      const auto step_end = extras.end_step(step, epoch_end, checkpoints);  // past the lesson: --join; at the `}`: preempted (06), --kill-rank
      if (epoch_end) {
        ddp::Progress::Pause paused(progress);  // samples/s counts training only
        out.validation(*(last_eval = ddp::evaluate(model, ddp_model, test, group, o.batch_size, device)), step + 1);
      }
      if (epoch_end || (o.ckpt_every && (step + 1) % *o.ckpt_every == 0)) {
        ddp::Progress::Pause paused(progress);
        checkpoints.save(step + 1);
      }
    }  // step_end's end: 06's stop vote after the step (RunExtras::after_step, extras.h)
    progress.summary();

    // 7. Check the result: the ranks agree bit for bit, and the model learned something.
    extras.end_training(ddp_model);  // past the lesson: the overlap share, memory, --trace merged
    const bool same = ddp::toy::replicas_identical(group, params);
    ddp::log0(std::string("check: every rank holds the same parameters: ") + (same ? "OK" : "FAILED"));
    if (!last_eval) last_eval = ddp::evaluate(model, ddp_model, test, group, o.batch_size, device);
    const double floor = o.expect_accuracy.value_or(0.1);
    const bool learned = last_eval->accuracy > floor;
    ddp::log0("check: test accuracy " + ddp::percent(last_eval->accuracy) + " is above " + ddp::percent(floor) +
              (o.expect_accuracy ? " (--expect-accuracy)" : " (chance)") + ": " + (learned ? "OK" : "FAILED"));
    ddp::log0("params fingerprint " + ddp::toy::fingerprint(params) + " (bit-identical runs print the same)");
    DDP_CHECK(same, "the ranks' parameters differ");
    DDP_CHECK(learned, "test accuracy " << last_eval->accuracy << " is not above " << floor);
    group.pg->barrier()->wait();
    return ddp::kExitOk;
  };
  return ddp::guarded_main([&] { return o.nproc_per_node ? ddp::fork_ranks(argc, argv, flags, o, one_rank) : one_rank(); });
}
