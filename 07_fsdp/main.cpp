// 07_fsdp: past replicas. Each rank keeps 1/N of the parameters, gradients and optimizer state:
// every unit (a layer) is all-gathered whole only while it computes, and its gradients are
// reduce-scattered to the rank that owns each row. 05's trainer, with its DDP class replaced.
//
// Read (README.md's list): steps 3-7 (05's, with what changed marked `FSDP:`), then fsdp.cpp's
// gather, free and reduce-scatter, then ring_halves (chapter 03's ring cut in two).
//
// Usage:
//   ./build-cpu/07_fsdp --nproc-per-node 2                 # forks 2 ranks (02_spawn's launcher)
//   ./build-cpu/07_fsdp --rank 0 --world-size 2 &  ./build-cpu/07_fsdp --rank 1 --world-size 2
//   ./build-cpu/07_fsdp --nproc-per-node 3 --model cnn --prefetch 0
//   .venv/bin/torchrun --nproc-per-node 2 --no-python ./build-cuda/07_fsdp --collectives c10d
//
// Expected output (./build-cpu/07_fsdp --nproc-per-node 2 --train-samples 6400 --epochs 2 --warmup-steps 10
// --log-every 50; trimmed; "mean loss" is the mean over the steps since the line before, so the
// README's run, which logs every 25, shows another one at step 100):
//   [rank 0/2] model mlp: 3 units: fc1 (401920 elements, 200960 a rank), fc2 (131328 elements, 65664 a rank),
//              fc3 (2570 elements, 1285 a rank); prefetch 1, the ring's two halves
//   [rank 0/2] epoch 2/2 [##########] step 100/100 mean loss 0.4819 lr 1.523e-05 3766 samples/s ETA 0:00
//   [rank 0/2] validation after step 100: loss 0.5226, accuracy 80.90% (10000 images)
//   [rank 0/2] checkpoint written: 2 shards, runs/07_fsdp/mlp-sgd-fashion-mnist-6400/checkpoints/rank-<r>/ckpt-000000100.pt
//   [rank 0/2] memory: this rank's shards: 267909 parameters, 267909 gradients, 267909 optimizer state (k = 1):
//              3.07 MiB of float32; the formula 4Ψ(2+k)/N: 3.07 MiB; whole while it computes, the largest unit:
//              401920 elements (1.53 MiB of parameters, in backward as much of gradient)
//   [rank 0/2] check: optimizer state = k x this rank's rows: OK
//   [rank 0/2] check: bytes the rings sent in the last step, all ranks: 6429816 = world x (2 x 1 + 1) x (world-1) x
//              1071636 shard bytes: OK
//   [rank 0/2] check: test accuracy 80.90% is above 10.00% (chance): OK
//   [rank 0/2] params fingerprint a64c7e99350aa575 (bit-identical runs print the same)
// (05_ddp with the same flags prints the same fingerprint: at 2 ranks every sum is a + b.)

#include "05_ddp/beyond/elastic.h"
#include "05_ddp/beyond/faults.h"
#include "05_ddp/trainer/batches.h"
#include "05_ddp/trainer/launch.h"
#include "05_ddp/trainer/metrics.h"
#include "05_ddp/models.h"
#include "05_ddp/trainer/trainer.h"
#include "05_ddp/trainer/validation.h"
#include "07_fsdp/fsdp.h"
#include "07_fsdp/fsdp_flags.h"
#include "07_fsdp/sharded_checkpoint.h"
#include "07_fsdp/units.h"
#include "07_fsdp/memory_report.h"
#include "common/basics/failure.h"
#include "common/compute/tensor_memory.h"
#include "common/compute/reproducible.h"
#include "common/data/fashion_mnist.h"
#include "common/data/sampler.h"
#include "common/data/toy_task.h"

int main(int argc, char** argv) {
  CLI::App app{"07_fsdp: train an MLP or a CNN on Fashion-MNIST with parameters, gradients and optimizer state sharded"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::TrainerOptions o;
  ddp::add_trainer_options(app, o);
  ch07::FsdpFlags f;  // FSDP: --prefetch, --collectives (fsdp_flags.h)
  ch07::add_fsdp_flags(app, f);
  ddp::parse_flags(app, argc, argv);

  auto one_rank = [&] {
    ddp::make_reproducible(o.deterministic == "on");

    // 1. Join the group (chapter 01); each rank keeps its own log file in the run's folder.
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    const torch::Device device = ddp::device_for(group.info);
    ddp::split_global_batch(o, world);  // past the lesson: --global-batch, the batch size follows the world (05's)
    ddp::Faults faults(o, rank, world);  // past the lesson: --kill-rank, --straggle-rank (05's faults.h)
    ddp::RunOutput out(ddp::run_folder(o, "07_fsdp"), group, device);

    // 2. Data: every rank holds the whole set; the sampler picks this rank's share.
    auto [train, test] = ddp::load_datasets(o);
    ddp::log0("compute: " + ddp::describe_compute(device) + (o.deterministic == "on" ? ", deterministic" : ", --deterministic off"));
    ddp::log0("data: " + std::to_string(train.size()) + " train / " + std::to_string(test.size()) + " test images from " + train.source);
    ddp::DeviceBatches batches(train, device);
    ddp::TensorMemory::start(o.memory_limit_mb);  // FSDP: tensors counted (and limited) from here: model, checkpoint, training
    ddp::DistributedSampler sampler(train.size(), rank, world, /*shuffle=*/true, o.seed);
    const int64_t n_batches = (sampler.num_samples() + o.batch_size - 1) / o.batch_size;
    const int64_t steps_per_epoch = (n_batches + o.grad_accum - 1) / o.grad_accum;
    const int64_t total_steps = std::min<int64_t>(o.epochs * steps_per_epoch, o.max_steps.value_or(INT32_MAX));
    const ddp::SamplerState sampler_state{o.seed, steps_per_epoch, int64_t{world} * o.batch_size * o.grad_accum, world,
                                          ddp::data_name(o), train.size()};

    // 3. FSDP: the model, the same on every rank (the same seed), cut into units and sharded; the
    //    optimizer gets this rank's shards only, so its state is 1/world of the model's too.
    ddp::AnyModel model = ddp::make_model(o.model, o.seed);
    model.module->to(device);
    ch07::FullyShardedDataParallel fsdp(ch07::units_of(o.model, model), group, f.collectives, f.prefetch);
    const ddp::AnyModel sharded{model.module, [&fsdp](const torch::Tensor& x) { return fsdp.forward(x); }};  // FSDP: for validation
    ddp::OptimizerFactory make_optimizer = ddp::optimizer_factory(o);
    std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(fsdp.parameters());
    ddp::log0("model " + o.model + ": " + fsdp.describe() + "; prefetch " + std::to_string(f.prefetch) + ", " +
              ch07::describe(f.collectives));

    // 4. FSDP: resume from the newest checkpoint: each rank's shard from its own file, or at
    //    another world its rows from the old files that hold them (sharded_checkpoint.h).
    ch07::ShardedCheckpoints checkpoints(out.checkpoints, sampler_state, o, fsdp, *optimizer, group);
    int64_t step = checkpoints.resume_or_reset(o);  // FSDP: sharded_checkpoint.h
    if (step == 0 && rank == 0 && !o.save_init.empty()) ddp::toy::save_params(fsdp.full_parameters(), o.save_init);
    else if (step == 0 && !o.save_init.empty()) fsdp.full_parameters();  // every rank takes part in the gathers
    if (step > 0 && step >= total_steps) ddp::say_already_finished(o, out.dir, step, total_steps);

    // 5. Train. Each step: o.grad_accum micro-batches, all but the last under no_sync().
    ddp::Progress progress(out, total_steps, steps_per_epoch, o.epochs, world * o.batch_size * o.grad_accum, o.log_every);
    std::optional<ddp::Evaluation> last_eval;
    std::vector<int64_t> order;
    int64_t sent_last_step = 0, recut_last_step = 0, last_micro_batches = 0;  // for the check, of the last step
    for (; step < total_steps; ++step) {
      faults.before_step(step);
      const int64_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
      if (order.empty() || in_epoch == 0) {
        sampler.set_epoch(epoch);
        order = sampler.indices();
        batches.set_order(order);
      }
      const int64_t sent_before = fsdp.bytes_sent(), recut_before = fsdp.recut_bytes();
      const double lr = ddp::learning_rate(o, step, total_steps);
      for (auto& g : optimizer->param_groups()) g.options().set_lr(lr);
      ddp::zero_grad(*optimizer);
      const int64_t first = in_epoch * o.grad_accum, last = std::min(n_batches, first + o.grad_accum);
      torch::Tensor step_loss = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
      for (int64_t b = first; b < last; ++b) {
        auto no_sync = b + 1 < last ? fsdp.no_sync() : nullptr;  // FSDP: reduce-scatter on the last only
        const int64_t from = b * o.batch_size, to = std::min<int64_t>(from + o.batch_size, order.size());
        auto [images, labels] = batches.get(from, to);
        // FSDP: forward gathers each unit before it computes and frees it after; backward
        // gathers it again and reduce-scatters its gradients (Note [A step of FSDP]).
        torch::Tensor loss = torch::nn::functional::cross_entropy(fsdp.forward(images), labels) / static_cast<double>(last - first);
        step_loss += loss.detach().to(torch::kFloat64);
        loss.backward();
      }
      optimizer->step();  // FSDP: on this rank's shards
      sent_last_step = fsdp.bytes_sent() - sent_before;
      recut_last_step = fsdp.recut_bytes() - recut_before;
      last_micro_batches = last - first;
      progress.step_done(step, step_loss, lr);

      // 6. Validate at each epoch's end; checkpoint then and every --ckpt-every steps.
      const bool epoch_end = in_epoch == steps_per_epoch - 1 || step + 1 == total_steps;
      if (epoch_end) {
        ddp::Progress::Pause paused(progress);
        out.validation(*(last_eval = ddp::evaluate(sharded, test, group, o.batch_size, device)), step + 1);
      }
      if (epoch_end || (o.ckpt_every && (step + 1) % *o.ckpt_every == 0)) {
        ddp::Progress::Pause paused(progress);
        checkpoints.save(step + 1);
      }
      faults.after_step(step);  // past the lesson: --kill-rank's rank dies here
    }
    progress.summary();

    // 7. FSDP: check the result: each rank held its 1/world of the optimizer state (Note [What
    //    each rank holds]), the rings sent (2 m + 1) x (world-1)/world of the parameters for m
    //    micro-batches (Note [The ring's two halves]), and the model learned something.
    const bool state_ok = ch07::report_memory(fsdp, *optimizer, world);
    ddp::log0(std::string("check: optimizer state = k x this rank's rows: ") + (state_ok ? "OK" : "FAILED"));
    std::vector<torch::Tensor> sent{torch::tensor({sent_last_step - recut_last_step, recut_last_step}).to(device)};
    group.pg->allreduce(sent)->wait();  // over all ranks: each sends a different share of the groups
    const int64_t ring = sent[0][0].item<int64_t>(), recut = sent[0][1].item<int64_t>(),
                  expected = world * (2 * last_micro_batches + 1) * (world - 1) * fsdp.sizes().shard * 4;
    const bool counted = f.collectives != ch07::Collectives::kC10d;  // c10d's collectives send what the backend sends
    const bool sent_ok = !counted || last_micro_batches == 0 || ring == expected;
    ddp::log0("check: bytes the rings sent in the last step, all ranks: " + std::to_string(ring) + " = world x (2 x " +
              std::to_string(last_micro_batches) + " + 1) x (world-1) x " + std::to_string(fsdp.sizes().shard * 4) +
              " shard bytes" + (recut ? " (and " + std::to_string(recut) + " re-cut)" : "") + ": " + (counted ? (sent_ok ? "OK" : "FAILED") : "not counted with --collectives c10d"));
    if (!last_eval) last_eval = ddp::evaluate(sharded, test, group, o.batch_size, device);
    const double floor = o.expect_accuracy.value_or(0.1);
    const bool learned = last_eval->accuracy > floor;
    ddp::log0("check: test accuracy " + ddp::percent(last_eval->accuracy) + " is above " + ddp::percent(floor) +
              (o.expect_accuracy ? " (--expect-accuracy)" : " (chance)") + ": " + (learned ? "OK" : "FAILED"));
    const std::vector<torch::Tensor> whole = fsdp.full_parameters();
    if (rank == 0 && !o.save_params.empty()) ddp::toy::save_params(whole, o.save_params);
    ddp::log0("params fingerprint " + ddp::toy::fingerprint(whole) + " (bit-identical runs print the same)");
    DDP_CHECK(state_ok, "the optimizer state is not k x this rank's rows");
    DDP_CHECK(sent_ok, "the rings sent " << ring << " bytes in the last step, not " << expected);
    DDP_CHECK(learned, "test accuracy " << last_eval->accuracy << " is not above " << floor);
    group.pg->barrier()->wait();
    return ddp::kExitOk;
  };
  return ddp::guarded_main([&] {
    ch07::refuse_what_07_does_not_do(app, f);  // 05's flags for its extras: exit 2, named
    return o.nproc_per_node ? ddp::fork_ranks(argc, argv, flags, o, one_rank) : one_rank();
  });
}
