// provides: the two options of PyTorch's reducer itself, gradient_as_bucket_view and
// find_unused_parameters, as options of the class (Note [Reducer options]).
#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "05_ddp/ddp.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace ddp {

// Note [Reducer options]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A communication hook, Join and ZeRO compose onto DDP from outside (going_further/); these two
// cannot: they change what the reducer does with each gradient as it arrives (where it is
// stored; whether a bucket may complete without it) and which buckets it builds. PyTorch makes
// them arguments of DistributedDataParallel's constructor, handled inside its C++ reducer
// (reducer.cpp's initialize_bucket_views, search_unused_parameters). So they are options of
// our class too, each in a few guarded lines of ddp.cpp and the rest here.

// Note [Gradients as bucket views]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without it every gradient is stored twice: autograd accumulates it into .grad(), DDP copies it
// (times 1/world) into the bucket, all-reduces the bucket, and copies the average back into
// .grad(). With gradient_as_bucket_view=True each .grad() is made a view into its place in the
// bucket (PyTorch's reducer: grad = bucket_view), so the all-reduce averages the gradients
// where the optimizer reads them, and one copy of the model's size is gone (4 bytes per float32
// parameter). What PyTorch does, step by step, and so do we:
//   - when the gradient arrives and .grad() is not yet a view of the bucket (the first backward,
//     or .grad() was set to None by zero_grad(): LibTorch 2.x's default, not 1.13's): multiply
//     it into the bucket as usual, then .grad() = the view; the tensor autograd made is freed;
//   - when .grad() already is the view (zero_grad() zeroed it in place, and autograd accumulated
//     into it there): divide it in place, bucket_view.div_(world). Not x * (1/world): x / 3 and
//     x * (1/3) may differ in the last bit (1/3 is rounded to a float first), so at 3 ranks the
//     flag changes the result where PyTorch's changes it;
//   - after a (re)build of the buckets, each .grad() that exists is copied into its new place and
//     pointed at it (PyTorch's initialize_bucket_views);
//   - after the all-reduce nothing is copied back: .grad() is the average already.
// Gradient accumulation under no_sync() accumulates into the view too. A comm hook's result is
// copied into the bucket, and so into every .grad() at once.

void DistributedDataParallel::set_gradient_as_bucket_view(bool on) {
  before_first_backward("gradient_as_bucket_view");
  as_bucket_view_ = on;
  if (on) point_gradients_at_buckets();
}

void DistributedDataParallel::gradient_into_view(size_t i, torch::Tensor& view) {
  torch::Tensor& grad = params_[i].mutable_grad();
  if (grad.is_alias_of(view)) {
    if (!hook_) view.div_(divisor_);  // PyTorch's in-place division
    return;
  }
  copy_into_bucket(view, grad);
  grad = view.view_as(params_[i]);
}

void DistributedDataParallel::point_gradients_at_buckets() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    const Bucket& b = buckets_[bucket_of_[i]];
    torch::Tensor view = b.flat.narrow(0, b.offsets[slot_of_[i]], params_[i].numel()).view_as(params_[i]);
    if (grad.is_alias_of(view)) continue;
    view.copy_(grad);
    grad = view;
  }
}

// Note [Unused parameters]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A forward that skips a branch (--model mlp_branch skips its aux head on some batches) leaves
// that branch's parameters without a gradient: their hooks never fire, their bucket never
// completes, and DDP stops with the error that names them (finish_backward; PyTorch: "Expected
// to have finished reduction in the prior iteration"). PyTorch's find_unused_parameters=True,
// and ours (--find-unused-parameters):
//   - after each forward that will synchronise, walk the autograd graph back from the output
//     (prepare_for_backward) and list the parameters whose gradient accumulator it does not
//     reach: a walk over every node of the graph, every step, the price of the flag;
//   - when backward starts, mark those ready at once: their bucket slot gets their .grad() as it
//     is, times 1/world (LibTorch 1.13's zero_grad() leaves zeros there, 2.x's None: then zeros);
//   - a bitmap of the parameters whose hook fired on this rank is summed over the ranks (one more
//     all-reduce per step, of 4 bytes per parameter); a parameter no rank used keeps its .grad()
//     untouched, one that some rank used gets the bucket's value: the sum of the ranks that used
//     it divided by the world size (not by how many used it: PyTorch's averaging, kept for parity);
//   - the buckets are cut by size in definition order once and never rebuilt (PyTorch's
//     distributed.py: the rebuild needs a graph that does not change).
// Under no_sync() nothing is walked and no usage is recorded, as in PyTorch: the step's last
// micro-batch alone decides which parameters count as used.

struct DistributedDataParallel::UnusedParameters {
  std::vector<size_t> now;  // this forward's unreached parameters
  torch::Tensor used;       // 1 per parameter its hook saw, summed over the ranks
  bool summed = false;
  int64_t walks = 0, nodes = 0;
  double walk_us = 0;
  std::vector<int64_t> here, everywhere;  // steps each parameter was unused
};

void DistributedDataParallel::set_find_unused_parameters(bool on) {
  before_first_backward("find_unused_parameters");
  if (!on) return;
  if (as_bucket_view_) throw UsageError("--find-unused-parameters with --gradient-as-bucket-view: not both in this course (PyTorch allows it)");
  unused_ = std::make_shared<UnusedParameters>();
  unused_->here.assign(params_.size(), 0);
  unused_->everywhere.assign(params_.size(), 0);
  // PyTorch's buckets for this case: by size in definition order (1 MiB, then the cap), the
  // list reversed so that the last layers' bucket comes first; never rebuilt.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto assignment = assign_buckets(order, bytes_, cap_bytes_ == kOneBucket ? kOneBucket : kFirstBucketBytes, cap_bytes_);
  std::reverse(assignment.begin(), assignment.end());
  build_buckets(assignment);
  rebuilt_ = true;  // final: no rebuild after the first iteration
  log0("buckets cut by size in definition order, the last layers' first, never rebuilt (--find-unused-parameters): " +
       describe_buckets());
}

void DistributedDataParallel::prepare_for_backward(const torch::Tensor& output) {
  if (!unused_ || !sync_ || !torch::GradMode::is_enabled() || !output.requires_grad()) return;
  const double start = wall_us();
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack{output.grad_fn().get()};
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  unused_->now.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!seen.count(accumulators_[i].get())) unused_->now.push_back(i), ++unused_->here[i];
  }
  ++unused_->walks, unused_->nodes += static_cast<int64_t>(seen.size()), unused_->walk_us += wall_us() - start;
}

void DistributedDataParallel::mark_unused_ready() {
  unused_->summed = false;
  for (size_t i : unused_->now) {
    Bucket& b = buckets_[bucket_of_[i]];
    torch::Tensor view = b.flat.narrow(0, b.offsets[slot_of_[i]], params_[i].numel());
    const torch::Tensor& grad = params_[i].grad();
    if (grad.defined()) copy_into_bucket(view, grad);
    else view.zero_();
    --b.pending;
  }
  unused_->now.clear();
  launch_ready_buckets();
}

bool DistributedDataParallel::unused_everywhere(size_t i) {
  if (!unused_->summed) {  // once per backward, on every rank at the same point of finish_backward
    std::vector<torch::Tensor> used{torch::zeros({static_cast<int64_t>(params_.size())}, torch::kInt32)};
    for (size_t j : ready_order_) used[0][static_cast<int64_t>(j)] = 1;
    used[0] = used[0].to(params_[0].device());
    run(group_, "all-reduce", "unused-parameters", used[0].numel() * 4, [&] { return group_.pg->allreduce(used); });
    unused_->used = used[0].cpu();
    unused_->summed = true;
    for (size_t j = 0; j < params_.size(); ++j) unused_->everywhere[j] += unused_->used[static_cast<int64_t>(j)].item<int>() == 0;
  }
  return unused_->used[static_cast<int64_t>(i)].item<int>() == 0;
}

std::string DistributedDataParallel::describe_unused() const {
  if (!unused_) return "";
  char cost[160];
  std::snprintf(cost, sizeof(cost), "graph walked %lld times, %.0f nodes and %.1f us per walk",
                static_cast<long long>(unused_->walks), unused_->walks ? static_cast<double>(unused_->nodes) / unused_->walks : 0.0,
                unused_->walks ? unused_->walk_us / unused_->walks : 0.0);
  std::string s = std::string("--find-unused-parameters: ") + cost;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unused_->here[i] || unused_->everywhere[i]) {
      s += "; " + names_[i] + " unused here in " + std::to_string(unused_->here[i]) + " step(s), on every rank in " +
           std::to_string(unused_->everywhere[i]);
    }
  }
  return s;
}

}  // namespace ddp
