// provides: sync_batch_norm(): forward and backward of BatchNorm over all ranks' batches.
#include "05_ddp/beyond/sync_batch_norm.h"

#include "common/observe/flight_recorder.h"

namespace ddp {

// Note [SyncBatchNorm]
// BatchNorm normalises each channel with the mean and variance of the batch it is given. Under
// DDP that is the rank's own batch: with 4 ranks of 8 images, each rank's statistics come from
// 8 images, not 32 — noisy, and different on every rank. SyncBatchNorm makes the statistics
// those of the global batch, so N ranks of b images compute what one process computes on N·b.
//
// Forward: each rank sums its x and x² per channel and counts its values; one all-reduce adds
// the three over the ranks; mean = Σx/n, var = Σx²/n - mean² (biased, to normalise; the running
// variance takes the unbiased n/(n-1) of it, as BatchNorm's). The sums are taken in float64:
// Σx²/n - mean² in float32 cancels away most digits when the mean is large against the spread.
//
// Backward: y = (x - mean)·invstd·w + b, and mean and invstd depend on every rank's x, so
// dL/dx needs two per-channel sums over the global batch: Σdy and Σdy·(x - mean). One more
// all-reduce adds the ranks' local sums; then, with n the global count,
//   dx = (dy - Σdy/n - (x - mean)·invstd²·Σdy(x-mean)/n) · invstd · w.
// The all-reduce sums the terms of every rank's loss, so dx is the gradient of the ranks' losses
// summed; DDP then averages the parameters' gradients over the ranks: the gradient of the mean,
// as one process on the global batch. The weight's and bias's own gradients (Σdy(x-mean)·invstd,
// Σdy) are this rank's local sums: DDP's all-reduce averages them with the others'.
//
// This is PyTorch's SyncBatchNorm (torch/nn/modules/_functions.py), which gathers each rank's
// mean, variance and count instead of the sums, and runs on GPUs only; ours runs on Gloo too.
// Two all-reduces per layer and step, in forward and in backward, that no bucket can hide.

namespace {

// The group, for backward: an autograd Function keeps only IValues, so it travels in a capsule.
struct GroupRef : torch::CustomClassHolder {
  explicit GroupRef(Group& g) : group(g) {}
  Group& group;
};

// Adds `t` over the ranks, in place, through the flight recorder (a failure names the rank).
void all_reduce_sum(Group& g, torch::Tensor& t, const char* tag) {
  std::vector<torch::Tensor> v{t};
  run(g, "all-reduce", tag, t.numel() * t.element_size(), [&] { return g.pg->allreduce(v); });
}

// Per channel of an (N, C, H, W) tensor, shaped to broadcast against it.
torch::Tensor per_channel(const torch::Tensor& t) { return t.view({1, -1, 1, 1}); }

struct SyncBatchNormFn : torch::autograd::Function<SyncBatchNormFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps, const c10::intrusive_ptr<GroupRef>& ref) {
    const int64_t channels = x.size(1);
    const std::vector<int64_t> dims{0, 2, 3};
    const torch::Tensor xd = x.to(torch::kFloat64);
    torch::Tensor stats = torch::cat({xd.sum(dims), xd.square().sum(dims), torch::full({1}, double(x.numel() / channels), xd.options())});
    all_reduce_sum(ref->group, stats, "sync-bn statistics");
    const torch::Tensor n = stats[2 * channels];
    const torch::Tensor mean = stats.narrow(0, 0, channels) / n;
    const torch::Tensor var = stats.narrow(0, channels, channels) / n - mean.square();
    running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype()), momentum);
    running_var.mul_(1 - momentum).add_((var * n / (n - 1)).to(running_var.dtype()), momentum);

    // In the parameters' dtype (float32 also when autocast gives x in bf16/fp16); y in x's.
    const auto acc = weight.scalar_type();
    const torch::Tensor mean_f = mean.to(acc), invstd = (var + eps).rsqrt().to(acc);
    ctx->save_for_backward({x, weight, mean_f, invstd, n.to(acc)});
    ctx->saved_data["group"] = c10::IValue::make_capsule(ref);
    const torch::Tensor scale = invstd * weight;  // y = x·scale + shift, as BatchNorm's CPU kernel
    return (x.to(acc) * per_channel(scale) + per_channel(bias - mean_f * scale)).to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &n = saved[4];
    const auto ref = c10::static_intrusive_pointer_cast<GroupRef>(ctx->saved_data["group"].toCapsule());
    const auto acc = weight.scalar_type();
    const torch::Tensor dy = grads[0].to(acc);
    const int64_t channels = x.size(1);
    const std::vector<int64_t> dims{0, 2, 3};
    const torch::Tensor xmu = x.to(acc) - per_channel(mean);
    torch::Tensor sums = torch::cat({dy.sum(dims), (dy * xmu).sum(dims)});
    // The parameters' own gradients, from this rank's batch: DDP averages them (see above).
    const torch::Tensor grad_weight = sums.narrow(0, channels, channels) * invstd, grad_bias = sums.narrow(0, 0, channels).clone();
    all_reduce_sum(ref->group, sums, "sync-bn gradient terms");
    const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / n, mean_dy_xmu = sums.narrow(0, channels, channels) / n;
    const torch::Tensor dx = (dy - per_channel(mean_dy) - xmu * per_channel(invstd.square() * mean_dy_xmu)) * per_channel(invstd * weight);
    return {dx.to(x.scalar_type()), grad_weight, grad_bias, {}, {}, {}, {}, {}};
  }
};

}  // namespace

Normalise sync_batch_norm(Group& group) {
  auto ref = c10::make_intrusive<GroupRef>(group);
  return [ref](torch::nn::BatchNorm2d& bn, const torch::Tensor& x) {
    const auto& o = bn->options;
    // As PyTorch's: plain BatchNorm where there is nothing to synchronise.
    if (!bn->is_training() || ref->group.size() == 1) return bn->forward(x);
    TORCH_CHECK(o.affine() && o.track_running_stats(), "sync_batch_norm: a BatchNorm with affine and track_running_stats");
    double momentum = o.momentum().value_or(0);
    {
      torch::NoGradGuard counting;
      bn->num_batches_tracked.add_(1);
      // momentum None: a cumulative average, as BatchNorm's forward
      if (!o.momentum()) momentum = 1.0 / bn->num_batches_tracked.item<double>();
    }
    return SyncBatchNormFn::apply(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, momentum, o.eps(), ref);
  };
}

}  // namespace ddp
