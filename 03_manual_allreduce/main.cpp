// 03_manual_allreduce: data parallelism by hand — every rank trains on its own data, and the
// gradients are averaged with an all-reduce after backward, so every rank takes the same step.
//
// The lesson: after `autograd::grad`, all-reduce each gradient (SUM), divide by the world size,
// and apply the update. Every rank then holds the same parameters, and they equal (up to the
// order of floating-point sums) one process trained on all ranks' data at once.
//
// Usage (one terminal per rank, as in 01):
//   ./build-cpu/03_manual_allreduce --rank 0 --world-size 2
//   ./build-cpu/03_manual_allreduce --rank 1 --world-size 2
// Forked by chapter 02's launcher:
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/03_manual_allreduce
// With a timeline of every step (open it in https://ui.perfetto.dev; docs/observing.md):
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/03_manual_allreduce --trace runs/03.json
//
// Expected output (rank 0; trimmed):
//   [rank 0/2] step 0: loss 0.2615 (mean over ranks)
//   [rank 0/2] step 19: loss 0.1072 (mean over ranks)
//   [rank 0/2] check: every rank holds the same parameters: OK
//   [rank 0/2] check: single process on the global batch: max |diff| = 2.98e-08 <= 1e-05: OK
//   [rank 0/2] check: the loss went down: 0.2615 -> 0.1072: OK
//   [rank 0/2] params fingerprint bbff0abd97303d08 (bit-identical runs print the same)

#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/observe/run_trace.h"
#include "common/data/toy_task.h"
#include "common/observe/trace.h"

int main(int argc, char** argv) {
  CLI::App app{"03_manual_allreduce: train with gradients all-reduced by hand after backward"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::toy::TrainFlags train;
  ddp::toy::add_train_flags(app, train);
  ddp::toy::TrainConfig& cfg = train.cfg;
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    // 1. Join the group (chapter 01's steps; --explain-env prints the settings and stops).
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    ddp::open_trace(train.trace, group);  // --trace: forward, backward, each all-reduce, update

    // 2. The same model on every rank: the same seed gives the same initial weights. It lives
    //    on this rank's device: the CPU with Gloo, cuda:<local rank> with NCCL.
    const torch::Device device = ddp::device_for(group.info);
    auto model = ddp::toy::make_model(cfg.seed);
    model->to(device);
    std::vector<torch::Tensor> params = model->parameters();
    if (rank == 0 && !train.save_init.empty()) ddp::toy::save_params(params, train.save_init);

    // 3. Train. Each rank sees only its own slice of every step's global batch.
    ddp::toy::LossLog losses(group, cfg.steps);
    for (int step = 0; step < cfg.steps; ++step) {
      auto [x, y] = ddp::toy::batch(step, rank, cfg.batch, world, device);
      torch::Tensor loss;
      std::vector<torch::Tensor> grads;
      {
        ddp::Span forward("forward");
        loss = torch::mse_loss(model->forward(x), y);
      }
      {
        ddp::Span backward("backward");
        grads = torch::autograd::grad({loss}, params);
      }

      // 4. Average the gradients across ranks: all-reduce(SUM), then divide by the world size.
      //    After this every rank holds the same gradient: the mean over all R*B samples.
      //    Only now, with backward over, does communication start: nothing overlaps it.
      for (torch::Tensor& g : grads) {
        std::vector<torch::Tensor> buffer{g};
        ddp::traced(group.pg->allreduce(buffer), "all-reduce", g.numel() * g.element_size())->wait();
        g.div_(world);
      }

      // 5. The update, by hand: p <- p - lr * g, outside autograd. Same gradient, same
      //    parameters, same update: the replicas stay identical.
      {
        ddp::Span update("optimizer");
        torch::NoGradGuard no_grad;
        for (size_t k = 0; k < params.size(); ++k) params[k].add_(grads[k], -cfg.lr);
      }

      losses.add(step, loss);
    }

    // 6. Check the result three ways (exit code 1 if one fails): the ranks agree, they match
    //    one process on the global batch (see Note [Tolerance against one process] in
    //    common/data/toy_task.h), and the loss went down.
    ddp::toy::check_training(group, params, cfg, losses, train.save_params);
    ddp::finish_trace(train.trace, group);
    group.pg->barrier()->wait();
    return ddp::kExitOk;
  });
}
