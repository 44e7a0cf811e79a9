// 04_grad_hooks: the averaging of chapter 03, moved into gradient hooks, so that a stock
// optimizer (SGD with momentum, Adam) works unchanged: backward() returns averaged gradients.
//
// The lesson: a hook on each parameter's gradient accumulator fires as soon as that gradient
// is ready, in reverse layer order, while backward is still running. It all-reduces the
// gradient, either at once (--comm sync) or by starting the all-reduce and waiting for all of
// them at the end of backward (--comm async), which lets communication overlap computation.
//
// Usage (one terminal per rank, as in 01):
//   ./build-cpu/04_grad_hooks --rank 0 --world-size 2 --comm async --optimizer adam
//   ./build-cpu/04_grad_hooks --rank 1 --world-size 2 --comm async --optimizer adam
// Forked by chapter 02's launcher:
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/04_grad_hooks
// With a timeline (--comm async shows all-reduces running while backward goes on):
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/04_grad_hooks --comm async --trace runs/04.json
//
// Expected output (rank 0, default --optimizer sgd; trimmed):
//   [rank 0/2] step 1: loss 0.2615 (mean over ranks)
//   [rank 0/2] step 20: loss 0.1072 (mean over ranks)
//   [rank 0/2] check: every rank holds the same parameters: OK
//   [rank 0/2] check: single process on the global batch: max |diff| = 2.98e-08 <= 1e-05: OK
//   [rank 0/2] check: the loss went down: 0.2615 -> 0.1072: OK
//   [rank 0/2] params fingerprint bbff0abd97303d08 (bit-identical runs print the same)
// With --optimizer sgd the fingerprint is chapter 03's: the same numbers, bit for bit.

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>


#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/observe/run_trace.h"
#include "common/data/toy_task.h"
#include "common/observe/trace.h"

// Note [Which hook]
// Tensor::register_hook runs on the gradient *before* it is added into p.grad(). An async
// all-reduce started there works on a tensor that autograd is about to add into .grad (or
// adopts as .grad), while the all-reduce is still writing into it: the result was wrong, and
// different from run to run. The hook DDP itself uses is a post-hook on the parameter's
// gradient accumulator (AccumulateGrad): it runs after the gradient is in p.grad(), which is
// then safe to all-reduce in place.
//
// Note [Keep the accumulator alive]
// A parameter holds its AccumulateGrad node only through a weak pointer. Unless someone keeps
// the shared_ptr that grad_accumulator() returns, the node (with our hook) is freed, a new one
// is made at the next backward, and the hook silently never fires. `accumulators` keeps them.

int main(int argc, char** argv) {
  CLI::App app{"04_grad_hooks: train with gradients all-reduced by hooks during backward"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::toy::TrainFlags train;
  ddp::toy::add_train_flags(app, train);
  ddp::toy::TrainConfig& cfg = train.cfg;
  std::string comm = "sync";
  app.add_option("--optimizer", cfg.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->check(ddp::finite_number())->check(CLI::Range(0.0, 1.0));
  app.add_option("--comm", comm, "sync: wait in each hook; async: start in the hook, wait at the end of backward")
      ->check(CLI::IsMember({"sync", "async"}));
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    // 1. Join the group (chapter 01's steps; --explain-env prints the settings and stops).
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    ddp::open_trace(train.trace, group);  // --trace: forward, backward, each all-reduce, step

    // 2. The same model on every rank: the same seed gives the same initial weights. It lives
    //    on this rank's device: the CPU with Gloo, cuda:<local rank> with NCCL.
    const torch::Device device = ddp::device_for(group.info);
    auto model = ddp::toy::make_model(cfg.seed);
    model->to(device);
    std::vector<torch::Tensor> params = model->parameters();
    if (rank == 0 && !train.save_init.empty()) ddp::toy::save_params(params, train.save_init);
    // A stock optimizer, SGD (--momentum) or Adam: it never learns that it runs distributed.
    std::unique_ptr<torch::optim::Optimizer> optimizer = ddp::toy::make_optimizer(params, cfg);

    // 3. A hook per parameter, run by autograd right after the gradient has been added into
    //    p.grad(). See Note [Which hook] and Note [Keep the accumulator alive].
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
    std::vector<std::pair<torch::Tensor, c10::intrusive_ptr<c10d::Work>>> in_flight;  // async only
    bool end_of_backward_queued = false;
    for (torch::Tensor& p : params) {
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [&, p](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            // 4. Average this gradient across ranks: all-reduce(SUM), then divide.
            std::vector<torch::Tensor> buffer{p.grad()};
            const int64_t bytes = p.grad().numel() * p.grad().element_size();
            if (comm == "sync") {
              ddp::traced(group.pg->allreduce(buffer), "all-reduce", bytes)->wait();
              p.grad().div_(world);
              return outputs;
            }
            in_flight.emplace_back(p.grad(), ddp::traced(group.pg->allreduce(buffer), "all-reduce", bytes));  // runs while backward goes on
            if (!end_of_backward_queued) {
              end_of_backward_queued = true;
              // Runs once, when backward has finished: wait for every all-reduce before step().
              torch::autograd::Engine::get_default_engine().queue_callback([&] {
                ddp::Span waiting("wait for all-reduces");
                for (auto& [grad, work] : in_flight) work->wait(), grad.div_(world);
                in_flight.clear();
                end_of_backward_queued = false;
              });
            }
            return outputs;
          }));
      accumulators.push_back(accumulator);
    }

    // 5. Train: the loop of a single-process program. backward() now returns averaged
    //    gradients, so the stock optimizer takes the same step on every rank.
    ddp::toy::LossLog losses(group, cfg.steps);
    for (int step = 0; step < cfg.steps; ++step) {
      auto [x, y] = ddp::toy::batch(step, rank, cfg.batch, world, device);
      optimizer->zero_grad();
      torch::Tensor loss;
      {
        ddp::Span forward("forward");
        loss = torch::mse_loss(model->forward(x), y);
      }
      {
        ddp::Span backward("backward");
        loss.backward();
      }
      {
        ddp::Span update("optimizer");
        optimizer->step();
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
