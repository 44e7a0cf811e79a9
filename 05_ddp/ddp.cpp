// provides: DistributedDataParallel's core: buckets of gradients all-reduced while backward runs.
//
// Read: the Notes, then the constructor and the hook in the order they run: on_gradient_ready()
// (step 4), launch_ready_buckets() (step 5), finish_backward() (steps 6-7: the wait and the rebuild).
#include "05_ddp/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace ddp {

// Note [Buckets]
// Chapter 04 started one all-reduce per parameter: a model with hundreds of small tensors pays
// the latency of every one. DDP packs gradients into buckets of about --bucket-cap-mb (25 MiB by
// default) and all-reduces each bucket as one flat tensor. A bucket starts its all-reduce as
// soon as its last gradient has been accumulated, while backward goes on with earlier layers:
// that is the overlap. Gradients become ready in reverse layer order, so the buckets are built
// from the last parameters to the first, and the first bucket filled, the first ready, closes
// at 1 MiB: its all-reduce starts early in backward instead of after 25 MiB of gradients.
// "Small" is a floor, not a ceiling: a bucket closes once it holds at least its limit, so the
// MLP (its last five tensors 0.5 MiB, then fc1.weight's 1.5 MiB) is one bucket at any
// --bucket-cap-mb, and a tensor larger than the cap fills a bucket of its own. (PyTorch 2.11,
// given an explicit bucket_cap_mb, cuts the first bucket at that cap too; we keep the rule
// of PyTorch 1.13, which 2.11 still follows for its default.) The rule is assign_buckets(), in
// buckets.h: arithmetic on sizes, which bench's ddp_sim shares.
//
// Note [Rebuilding the buckets]
// The layer order is only a guess of the order in which gradients become ready (a layer used
// twice, or defined out of order, breaks it). So PyTorch does not guess: the first iteration
// uses one bucket holding every parameter, in definition order, and that bucket is complete
// only when backward is: the first iteration has no overlap. (torch/nn/parallel/distributed.py,
// _ddp_init_helper, PyTorch 1.13: bucket_size_limits = [sys.maxsize] when static_graph is True
// or find_unused_parameters is False: static_graph too has the one bucket first, and rebuilds;
// only find_unused_parameters without it cuts the first buckets by size: Note [Unused parameters].)
// After it DDP knows the real order: it rebuilds the buckets in that order, once, with the
// 1 MiB first bucket and then the cap, the small bucket now the first to be ready. The layout
// also decides how the sums round, so a checkpoint carries it (Note [Resuming in the same buckets]).
//
// Note [Divide before the sum]
// Each gradient is multiplied by 1/world while it is copied into its bucket, then the bucket
// is summed: the average. PyTorch's DDP does the same, in this order, which is why our result
// is bit-identical to it. Chapter 03 summed, then divided: the same in exact arithmetic only.

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Group& group,
                                                 size_t bucket_cap_bytes)
    : module_(std::move(module)), group_(group), cap_bytes_(bucket_cap_bytes), option_(std::make_unique<ReducerOption>(*this)) {
  set_gradient_divisor(group_.size());  // 1/world, multiplied in while copying (Note [Divide before the sum])
  // 1. Every rank starts from rank 0's weights (and buffers): one flat broadcast per dtype
  //    (broadcast_from(), in ddp_interface.cpp beside sync_buffers(), which uses it too).
  broadcast_from(module_state(), "parameters");

  // 2. The first iteration's bucket: every parameter, in definition order (Note [Rebuilding
  //    the buckets]); the 1 MiB first bucket and the cap apply from the rebuild.
  for (auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) order[i] = i, bytes_.push_back(params_[i].numel() * params_[i].element_size());
  build_buckets(assign_buckets(order, bytes_, SIZE_MAX, SIZE_MAX));

  // 3. A hook on each parameter's gradient accumulator, as in chapter 04.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

void DistributedDataParallel::build_buckets(const std::vector<std::vector<size_t>>& assignment) {
  buckets_.clear();
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (const auto& members : assignment) {
    Bucket b;
    b.params = members;
    int64_t total = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      bucket_of_[members[k]] = buckets_.size();
      slot_of_[members[k]] = k;
      b.offsets.push_back(total);
      total += params_[members[k]].numel();
    }
    b.flat = torch::zeros({total}, params_[members[0]].options().requires_grad(false));
    buckets_.push_back(std::move(b));
  }
  option_->buckets_built();  // nothing, unless a reducer option (Note [Reducer options] in ddp_options.cpp)
}

void DistributedDataParallel::on_gradient_ready(size_t i) {
  if (!sync_) return;  // inside no_sync(): the gradient stays in .grad() and accumulates
  if (!in_backward_) {
    // The first hook of this backward: every bucket is waiting for all of its gradients.
    in_backward_ = backward_seen_ = true;
    next_bucket_ = 0;
    for (auto& b : buckets_) b.pending = b.params.size(), b.reduction = Reduction{};
    ready_order_.clear();
    ready_at_launch_.clear();
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
    option_->backward_started();  // nothing, unless a reducer option
  }
  ready_order_.push_back(i);
  if (trace().on()) {  // each gradient's arrival: what bench/cost_model builds its buckets from
    trace().instant("gradient ready", "ddp", wall_us(), Trace::kCompute, {{"param", i}, {"bytes", bytes_[i]}});
  }
  // 4. Copy the gradient into its place in the bucket, times 1/world (Note [Divide before the sum]);
  //    with a comm hook as it is: the hook divides (Note [Communication hooks]).
  Bucket& b = buckets_[bucket_of_[i]];
  torch::Tensor view = b.flat.narrow(0, b.offsets[slot_of_[i]], params_[i].numel());
  option_->into_bucket(i, view);  // copy_into_bucket(view, its .grad()), unless a reducer option
  if (--b.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::copy_into_bucket(torch::Tensor& view, const torch::Tensor& grad) {
  if (hook_) view.copy_(grad.reshape(-1));
  else at::mul_out(view, grad.reshape(-1), inverse_world_);  // one kernel, as PyTorch's reducer
}

void DistributedDataParallel::launch_ready_buckets() {
  // 5. Start the all-reduce of every complete bucket, strictly in bucket order: every rank
  //    must issue the same collectives in the same order, whatever order its gradients came in.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    trace().instant("bucket" + std::to_string(next_bucket_) + " ready", "ddp", wall_us(), Trace::kCompute);
    GradBucket bucket = grad_bucket(next_bucket_);  // `flat` and its gradients, as a comm hook sees them
    b.reduction = run_comm_hook(bucket);  // allreduce_sum() (below), unless a hook is registered
    ready_at_launch_.push_back(ready_order_.size());
    ++next_bucket_;
  }
}

void DistributedDataParallel::finish_backward() {
  in_backward_ = false;
  launched_last_ = static_cast<int>(next_bucket_);
  // A parameter that took no part in the loss never gets a gradient: its bucket never starts,
  // and the ranks would wait for each other for ever. Say which one, as PyTorch does.
  if (next_bucket_ < buckets_.size()) throw_for_missing_gradients();
  // 6. Wait for every bucket and copy the averaged gradients back into .grad().
  const double computed = wall_us();  // every gradient is ready: backward's computing is over
  {
    Span waiting("wait for all-reduces", "ddp");
    for (auto& b : buckets_) {
      if (b.reduction.work.work) wait(group_, b.reduction.work);  // a hook may have started none
    }
  }
  for (const auto& observe : observers_) observe(*this, computed);
  for (auto& b : buckets_) {
    if (b.reduction.finish) b.reduction.finish();  // a comm hook's result into `flat`
    for (size_t k = 0; k < b.params.size(); ++k) {
      const size_t i = b.params[k];
      if (!option_->average_into_grad(i)) continue;  // true, unless a reducer option says otherwise
      torch::Tensor& grad = params_[i].mutable_grad();
      torch::Tensor average = b.flat.narrow(0, b.offsets[k], params_[i].numel()).view_as(params_[i]);
      if (grad.defined()) grad.copy_(average);
      else grad = average.clone();  // a parameter this rank did not use, but another did
    }
  }
  // 7. Once, after the first iteration: rebuild the buckets in the order gradients really
  //    became ready (Note [Rebuilding the buckets]).
  if (!rebuilt_) {
    rebuilt_ = true;
    build_buckets(assign_buckets(ready_order_, bytes_, cap_bytes_ == kOneBucket ? kOneBucket : kFirstBucketBytes, cap_bytes_));
    log0("buckets rebuilt in the order gradients became ready: " + describe_buckets());
  }
}

// The default: the sum of the bucket, each gradient divided already (Note [Divide before the sum]).
Reduction allreduce_sum(Group& group, GradBucket& bucket) {
  std::vector<torch::Tensor> t{bucket.buffer};
  // Returns at once; Gloo works in its own threads. Recorded and traced by issue() (common/observe/flight_recorder.h).
  return {issue(group, "all-reduce", bucket.tag, t[0].numel() * t[0].element_size(), [&] { return group.pg->allreduce(t); }), {}};
}

Reduction DistributedDataParallel::run_comm_hook(GradBucket& bucket) {
  return hook_ ? hook_(bucket) : allreduce_sum(group_, bucket);
}

}  // namespace ddp
